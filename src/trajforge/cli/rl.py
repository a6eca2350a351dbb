"""`trajforge train rl`: policy-gradient iterations through serve and the recording proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trajforge.cli.common import JsonOption, config_from_options, guarded, print_json
from trajforge.cli.learn import train_app
from trajforge.errors import UserError
from trajforge.progress import ProgressLines

_FLAGS = {"tasks_per_iteration": "--tasks", "group_size": "--group", "kl_coef": "--kl"}
"""The flags of the RLConfig fields whose flag is not `--field-name`."""


def rl_command(
    out: Annotated[Path, typer.Option("--out", help="Run directory (one checkpoint/iteration).")],
    base: Annotated[
        Path | None, typer.Option("--base", help="Starting checkpoint, or smollm2-135m.")
    ] = None,
    iterations: Annotated[int, typer.Option("--iterations", min=1, help="Iterations.")] = 20,
    tasks: Annotated[int, typer.Option("--tasks", min=1, help="Training tasks/iteration.")] = 8,
    group: Annotated[int, typer.Option("--group", min=2, help="Rollouts per task.")] = 8,
    reward: Annotated[str, typer.Option("--reward", help="outcome | process.")] = "outcome",
    lr: Annotated[float, typer.Option("--lr", help="Learning rate.")] = 1e-4,
    kl: Annotated[float, typer.Option("--kl", help="KL-to-reference weight.")] = 0.0,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Agent steps/episode.")] = 20,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            min=1,
            help="Tokens per model call (default: the student's, 16 tiny, 48 pretrained).",
        ),
    ] = None,
    eval_every: Annotated[
        int, typer.Option("--eval-every", min=0, help="Held-out evaluation interval (0: off).")
    ] = 5,
    eval_tasks: Annotated[int, typer.Option("--eval-tasks", min=1, help="Held-out worlds.")] = 100,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Episodes at once.")] = 32,
    backend: Annotated[
        str, typer.Option("--backend", help="local (threads here) or ray (Ray tasks).")
    ] = "local",
    early_stop_after: Annotated[
        int, typer.Option("--early-stop-after", help="Monitor stop after N iterations (0: off).")
    ] = 0,
    weighting: Annotated[
        str,
        typer.Option(
            "--weighting",
            help="sample (each training sample weighs the same) or episode (an episode's "
            "samples share one weight).",
        ),
    ] = "sample",
    strategies: Annotated[
        int,
        typer.Option(
            "--strategies",
            min=0,
            help="Strategies in each episode's prompt, from a library the run distils from its "
            "own rollouts after every iteration (OUT/strategies.db; 0: off).",
        ),
    ] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Task draws, sampling, updates.")] = 0,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            help="torch CPU threads (default: torch's, one per core; give 1 to each of several "
            "runs sharing the machine). Also taken by --resume.",
        ),
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] = False,
    as_json: JsonOption = False,
) -> None:
    """GRPO-style RL of a student: rollouts through serve + proxy, update, hot reload."""
    from trajforge.train.rl import RLConfig, train_rl
    from trajforge.train.rl.checkpoints import read_run

    config = None
    if reward not in ("outcome", "process"):
        raise UserError(f"--reward must be outcome or process, not '{reward}'")
    if backend not in ("local", "ray"):
        raise UserError(f"--backend must be local or ray, not '{backend}'")
    if weighting not in ("sample", "episode"):
        raise UserError(f"--weighting must be sample or episode, not '{weighting}'")
    if resume and threads is not None:
        config_from_options(RLConfig, _FLAGS, threads=threads)  # refuses --threads 0
    if not resume:
        if base is None:
            raise UserError("give --base CHECKPOINT (or --resume)")
        config = config_from_options(
            RLConfig, _FLAGS,
            iterations=iterations, tasks_per_iteration=tasks, group_size=group,
            reward="process" if reward == "process" else "outcome",
            lr=lr, kl_coef=kl, max_steps=max_steps, max_new_tokens=max_new_tokens,
            eval_every=eval_every,
            eval_tasks=eval_tasks, concurrency=concurrency, seed=seed,
            early_stop_after=early_stop_after, backend="ray" if backend == "ray" else "local",
            strategies=strategies, weighting="episode" if weighting == "episode" else "sample",
            threads=threads,
        )  # fmt: skip
    total = config.iterations if config else RLConfig(**read_run(out)["config"]).iterations
    shown = _RLProgress(total)
    rows = train_rl(
        base, out, config, resume=resume, report=shown.row, on_episode=shown.episode,
        on_heldout=shown.heldout, threads=threads,
    )  # fmt: skip
    if as_json:
        print_json({"out": str(out), "iterations": rows})


class _RLProgress:
    """A line per finished iteration (its figures, the run's rate and ETA) and, within an
    iteration, throttled lines of its rollouts."""

    def __init__(self, iterations: int) -> None:
        self.iterations = ProgressLines("train rl", iterations, "iteration")
        self.rollouts: ProgressLines | None = None
        self.evaluation: ProgressLines | None = None
        self.current = 0

    def episode(self, iteration: int, done: int, total: int) -> None:
        if self.rollouts is None or iteration != self.current:
            self.rollouts = ProgressLines(f"train rl: iteration {iteration}", total, "rollout")
            self.current = iteration
        self.rollouts.update(done)

    def heldout(self, done: int, total: int) -> None:
        if done == 0 or self.evaluation is None:
            self.evaluation = ProgressLines("train rl: held-out evaluation", total, "episode")
        self.evaluation.update(done)

    def row(self, row: dict[str, Any]) -> None:
        _show_row(self.iterations, row)


def _median(row: dict[str, Any]) -> str:
    """` (median M)` where the row records the median k3 (rows of older runs do not)."""
    return f" (median {row['kl_median']:.2g})" if "kl_median" in row else ""


def _show_row(lines: ProgressLines, row: dict[str, Any]) -> None:
    """An iteration's figures as a progress line of its own."""
    fields: dict[str, object] = {}
    if "reward" in row:
        fields = {
            "reward": "—" if row["reward"] is None else f"{row['reward']:.3f}",
            "corr": f"{row['correlation']:.5f}",
            "max|dlogp|": f"{row['max_logprob_diff']:.2e}",
            "kl": f"{row['kl']:.4f}" + _median(row),
            "flat groups": f"{row['zero_variance_groups']:.2f}",
            "rollouts": f"{row['episodes_per_s']:.1f} ep/s {row['tokens_per_s']:.0f} tok/s",
            "drift": row["drift_points_dropped"],
        }
    if "strategies" in row:
        fields["strategies"] = f"{row['strategies']['library']} in library"
    if "monitor" in row:
        fields["monitor"] = row["monitor"]
    if row.get("monitor_on"):
        fields["stopped"] = f"{row['stopped']}/{row['episodes']}"
    held = row.get("heldout")
    if held:
        fields["held-out"] = f"{held['rate']:.3f} [{held['ci'][0]:.3f}, {held['ci'][1]:.3f}]"
    lines.show(int(row["iteration"]), **fields)


train_app.command("rl")(guarded(rl_command))

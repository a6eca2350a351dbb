"""RL from the learning-lab student: outcome-only against process-guided, and the handoff.

    python bench/rl_loop.py [--quick] [--base CKPT] [--seeds 3] [--iterations 20] [--tasks 8]
                            [--group 8] [--test-worlds 300] [--eval-every 5]
                            [--handoff-worlds 200] [--early-stop-after N] [--lr 1e-4]
                            [--concurrency 32]
                            [--compared-iterations N] [--outcome-runs DIR,DIR,...] [--work DIR]
                            [--out bench/results/rl_loop.json]
    python bench/rl_loop.py --runs DIR,DIR,... [--process-runs DIR,...] [--handoff-runs N]
                            [--early-stop-runs DIR,...] [--no-kl-probe]

1. The SFT starting point: `--base` (a `train sft` checkpoint), or the learning lab's E
   student trained here (the observable teacher's successes on 400 difficulty-1 worlds;
   hidden 128, 1,200 steps of batch 16, lr 1e-3).
2. `train rl` from it with each reward kind (outcome: the group-normalised success; process:
   plus fork-based step values), same iterations, tasks and group size (equal rollout
   episodes and model tokens; process additionally runs teacher forks, which cost no model
   tokens: their time is reported as `advantage_s`), `--seeds` seeds each. Every rollout
   goes through `trajforge serve` and the recording proxy; the iteration rows are those the
   loop stores.
3. Greedy held-out success (Wilson 95% intervals) every `--eval-every` iterations on
   `--test-worlds` worlds from the held-out seed range, pooled over seeds per iteration.
   `--compared-iterations` gives the process and early-stop arms fewer iterations than the
   outcome arm (when compute is short); the arms are then compared at equal episodes, at the
   last iteration both evaluated (`at_equal_episodes`).
4. The handoff matrix (REACH@k, SOLVE) of the SFT checkpoint and the final RL checkpoint
   (seed 0) of the `--handoff-kinds` arms (outcome by default: the four pairings), on other
   held-out worlds.
5. Early stop: one more outcome arm (`--early-stop-seeds` seeds) whose proxy stops rollouts
   the failure monitor flags once it has been fitted on the first `--early-stop-after`
   iterations' rollouts; episode-steps and reward per episode-step against the outcome arm
   on the same seeds and iterations (the same training tasks are drawn).

Runs already in `--work` with the same base and settings are continued, not started again
(a killed bench picks up where it stopped; other settings there are refused), and
`--outcome-runs DIR,DIR,...` takes finished outcome runs of the same settings (seed 0, 1,
...) made elsewhere instead of training them.

`--runs DIR,DIR,...` summarises `train rl` run directories made elsewhere (one seed each,
same base and settings) as an outcome arm, without training: the start's held-out success,
the curve, and per iteration what the update had to learn from (groups with equal rewards,
tokens with a non-zero advantage, entropy, KL, clipped share), and where the first run's
iteration-1 KL sits (its rollouts rescored under the start and the checkpoint) and how the
loss was spread over its sequences (how many are short, and their share of the loss).
With `--handoff-runs N` it adds the handoff matrix of the start and the last checkpoint of
each of the first N runs (`handoff_by_run`, on `--handoff-worlds` worlds). With
`--process-runs DIR,...` (runs of the same base and settings with `--reward process`) it adds
the process arm in the layout above: its curve, the episodes it took to reach the outcome
arm's final success, and both arms at equal episodes, on all seeds and on the process arm's
seeds alone (`at_equal_episodes_same_seeds`). With `--early-stop-runs DIR,...` (the same
with `--early-stop-after N`) it adds `early_stop`: episode-steps with and without the stop
over the iterations both trained, on the same seeds (pooled, and the share saved seed by
seed), and held-out success at the end of each.

The JSON result records the command, every setting and every iteration row. `--quick` is a
smoke run (a small student, two iterations, few worlds): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.recovery import household_rows
from trajforge.rollout.episode import Limits, run_episode
from trajforge.serve.student import Student
from trajforge.train.evaluate import fresh_starts, held_out_tasks, rate, run_lockstep, wilson
from trajforge.train.rl import RLConfig, train_rl
from trajforge.train.rl.handoff import handoff_matrix
from trajforge.train.rows import sequences
from trajforge.train.sft import SFTConfig, train_sft

RESULTS = Path(__file__).parent / "results" / "rl_loop.json"
KINDS = ("outcome", "process")
EARLY = "outcome_early_stop"


def train_base(work: Path, worlds: int, sft: SFTConfig) -> Path:
    """The learning lab's E student: SFT on the observable teacher's successes (kept in
    `work/sft`, and taken from there when an earlier run of the bench trained it)."""
    out = work / "sft"
    if (out / "trajforge.json").is_file():
        return out
    rows = []
    for seed in range(worlds):
        run = run_episode(
            HouseholdEnv(), ObservableTeacher(), task_for(seed, 1), limits=Limits(max_steps=20)
        )
        if run.outcome.success:
            rows += household_rows(run)
    tasks = sorted({r["task_id"] for r in rows})
    train_sft(
        sequences(rows),
        out,
        sft,
        manifest={"name": "sft", "train_tasks": tasks},
    )
    return out


def heldout_success(path: Path, worlds: int) -> dict[str, Any]:
    tasks = held_out_tasks(HouseholdEnv(), worlds, 1)
    runs = run_lockstep(Student(path), fresh_starts(HouseholdEnv, tasks), 20)
    return rate([bool(r.outcome.success) for r in runs])


def pooled(parts: list[dict]) -> dict[str, Any]:
    """The mean success over seeds. Every seed plays the same held-out worlds, so the interval
    counts each world once (Wilson at the mean rate over `n` worlds), not once per seed."""
    successes, n = sum(p["successes"] for p in parts), sum(p["n"] for p in parts)
    worlds = parts[0]["n"]
    mean = successes / n
    return {
        "success": round(mean, 4),
        "success_ci": list(wilson(round(mean * worlds), worlds)),
        "n": worlds,
        "seeds": len(parts),
        "success_by_seed": [p["rate"] for p in parts],
    }


def curve(runs: list[list[dict]], sft: dict, episodes_per_iteration: int) -> list[dict]:
    """Held-out success per evaluated iteration, the mean over seeds (iteration 0: the SFT)."""
    points = [{"iteration": 0, "episodes": 0, **pooled([sft])}]
    evaluated = sorted({r["iteration"] for rows in runs for r in rows if "heldout" in r})
    for iteration in evaluated:
        parts = [
            r["heldout"]
            for rows in runs
            for r in rows
            if r["iteration"] == iteration and "heldout" in r
        ]
        points.append(
            {
                "iteration": iteration,
                "episodes": iteration * episodes_per_iteration,
                **pooled(parts),
            }
        )
    return points


def episodes_to_reach(points: list[dict], target: float) -> int | None:
    return next((p["episodes"] for p in points if p["iteration"] and p["success"] >= target), None)


def run_kind(
    kind: str, base: Path, work: Path, seeds: int, config: RLConfig, given: list[Path] = ()
) -> dict[str, Any]:
    """Each seed's run of an arm: trained in `work/KIND-seedN`, continued there if a killed
    bench left it, or taken from `given` (finished runs of the same settings, by seed)."""
    runs, dirs = [], []
    for seed in range(seeds):
        out = given[seed] if seed < len(given) else work / f"{kind}-seed{seed}"
        reward = kind if kind in KINDS else config.reward
        settings = config.model_copy(update={"seed": seed, "reward": reward})
        runs.append(trained(base, out, settings, lambda row, k=kind, s=seed: _show(k, s, row)))
        dirs.append(out)
        print(f"{kind} seed {seed} done", file=sys.stderr, flush=True)
    return {"rows": runs, "dirs": dirs}


def trained(base: Path, out: Path, settings: RLConfig, report) -> list[dict[str, Any]]:
    """The iteration rows of the run in `out`: read back when it is finished, continued when
    a kill left it half-way, trained when it is not there (`same_run` checks the first two)."""
    from trajforge.train.rl.checkpoints import completed, rebuild_log

    if not (out / "rl.json").is_file():
        return train_rl(base, out, settings, report=report)
    same_run(out, base, settings)
    if len(completed(out)) == settings.iterations:
        return rebuild_log(out)
    return train_rl(None, out, None, resume=True, report=report)


def same_run(out: Path, base: Path, settings: RLConfig) -> None:
    """Refuse to continue or reuse a run made from another base or with other settings
    (torch threads aside)."""
    from trajforge.train.rl.checkpoints import read_run

    run = read_run(out)
    wanted = settings.model_dump(exclude={"threads"})
    found = RLConfig(**run["config"]).model_dump(exclude={"threads"})  # defaults filled in
    if Path(run["base"]) != base or found != wanted:
        differ = sorted(k for k in wanted if found.get(k) != wanted[k])
        raise SystemExit(f"{out}: another base or other settings ({differ or 'base'}); "
                         "move it away or pick another --work")  # fmt: skip


def _show(kind: str, seed: int, row: dict) -> None:
    held = row.get("heldout")
    text = f"{kind} s{seed} it {row['iteration']:>3}"
    if "reward" in row:
        text += f" reward {row['reward']:.3f} corr {row['correlation']:.5f}"
        text += f" kl {row['kl']:.4f} {row['episodes_per_s']:.1f} ep/s"
    if held:
        text += f" held-out {held['rate']:.3f} {held['ci']}"
    print(text, file=sys.stderr, flush=True)


def summarize(kind_runs: list[list[dict]], sft: dict, per_iteration: int) -> dict[str, Any]:
    """The arm's curve, and its final point: the last iteration every seed evaluated (runs
    stopped at different iterations leave later points with fewer seeds in the curve)."""
    points = curve(kind_runs, sft, per_iteration)
    final = [p for p in points if p["seeds"] == len(kind_runs) or not p["iteration"]][-1]
    rows = [r for rows in kind_runs for r in rows if "reward" in r]
    return {
        "success": final["success"],
        "success_ci": final["success_ci"],
        "final_iteration": final["iteration"],
        "curve": points,
        "correlation_min": min(r["correlation"] for r in rows),
        "max_logprob_diff": max(r["max_logprob_diff"] for r in rows),
        "train_reward_last": round(
            sum(r["reward"] for r in rows if r["iteration"] == final["iteration"]) / len(kind_runs),
            4,
        ),
        "episodes": sum(r["episodes"] for r in rows),
        "model_tokens": sum(round(r["tokens_per_s"] * r["rollout_s"]) for r in rows),
        "rollout_s": round(sum(r["rollout_s"] for r in rows), 1),
        "update_s": round(sum(r["update_s"] for r in rows), 1),
        "advantage_s": round(sum(r["advantage_s"] for r in rows), 1),
        "episodes_per_s_mean": round(sum(r["episodes_per_s"] for r in rows) / len(rows), 2),
        "drift_points_dropped": sum(r["drift_points_dropped"] for r in rows),
        "iterations": kind_runs,
    }


def at_equal_episodes(kinds: dict[str, dict]) -> dict[str, Any]:
    """Each arm's held-out success at the last iteration every arm evaluated (the arms may
    have run for different numbers of iterations), and process minus outcome there."""
    shared = set.intersection(*({p["iteration"] for p in kinds[k]["curve"]} for k in KINDS))
    iteration = max(shared)
    points = {k: next(p for p in kinds[k]["curve"] if p["iteration"] == iteration) for k in KINDS}
    return {
        "iteration": iteration,
        "episodes": points["outcome"]["episodes"],
        **{
            kind: {key: p[key] for key in ("success", "success_ci", "success_by_seed")}
            for kind, p in points.items()
        },
        "process_minus_outcome": round(
            points["process"]["success"] - points["outcome"]["success"], 4
        ),
    }


def same_seeds_then(outcome: dict, stopping: dict) -> dict[str, Any]:
    """The outcome arm's held-out success on the early-stop arm's seeds at its final
    iteration (what the early-stop arm's final success is to be held against)."""
    iteration = stopping["final_iteration"]
    parts = [
        row["heldout"]
        for rows in outcome["iterations"][: len(stopping["iterations"])]
        for row in rows
        if row["iteration"] == iteration and "heldout" in row
    ]
    return {"iteration": iteration, **pooled(parts)}


def early_stop(outcome: list[list[dict]], stopping: list[list[dict]], after: int) -> dict:
    """Episode-steps and reward per episode-step after the monitor is on, against the
    outcome arm on the same seeds and iterations (the same training tasks are drawn)."""
    pairs = []
    for rows_a, rows_b in zip(outcome, stopping, strict=False):
        trained = {b["iteration"]: b for b in rows_b if "reward" in b and b["iteration"] > after}
        pairs += [(a, trained[a["iteration"]]) for a in rows_a if a["iteration"] in trained]
    steps_plain = sum(a["episode_steps"] for a, _ in pairs)
    steps_stop = sum(b["episode_steps"] for _, b in pairs)
    reward_plain = sum(a["reward"] * a["episodes"] for a, _ in pairs)
    reward_stop = sum(b["reward"] * b["episodes"] for _, b in pairs)
    return {
        "monitor_after_iterations": after,
        "compared_iterations": len(pairs),
        "episode_steps_without": steps_plain,
        "episode_steps_with": steps_stop,
        "compute_saved": round(1 - steps_stop / steps_plain, 4) if steps_plain else None,
        "stopped_episodes": sum(b["stopped"] for _, b in pairs),
        "episodes": sum(b["episodes"] for _, b in pairs),
        "reward_per_step_without": round(reward_plain / steps_plain, 5) if steps_plain else None,
        "reward_per_step_with": round(reward_stop / steps_stop, 5) if steps_stop else None,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--base", type=Path)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--concurrency", type=int, default=32, help="episodes in flight")
    parser.add_argument("--test-worlds", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--handoff-worlds", type=int, default=200)
    parser.add_argument("--early-stop-seeds", type=int, default=1)
    parser.add_argument("--handoff-kinds", default="outcome", help="RL arms in the matrix")
    parser.add_argument(
        "--compared-iterations",
        type=int,
        default=0,
        help="Iterations of the process and early-stop arms (default: --iterations).",
    )
    parser.add_argument(
        "--early-stop-after", type=int, default=0, help="default: compared iterations/4"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/rl_loop"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--summarize", type=Path, help="Only summarise a result file again from its rows."
    )
    parser.add_argument(
        "--runs", help="Only summarise these train rl run directories (comma-separated)."
    )
    parser.add_argument(
        "--handoff-runs",
        type=int,
        default=0,
        help="With --runs: the handoff matrix of the start and the last checkpoint of each of "
        "the first N runs (on --handoff-worlds worlds).",
    )
    parser.add_argument(
        "--no-kl-probe",
        action="store_true",
        help="With --runs: leave out where iteration 1's KL sits (minutes of rescoring).",
    )
    parser.add_argument(
        "--process-runs",
        default="",
        help="With --runs: process-reward runs of the same base and settings to compare.",
    )
    parser.add_argument(
        "--early-stop-runs",
        default="",
        help="With --runs: runs of the same base and settings with --early-stop-after N.",
    )
    parser.add_argument(
        "--outcome-runs",
        default="",
        help="Finished outcome runs of these settings (seed 0, 1, ...) to use, not train.",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.iterations, args.tasks, args.group = 1, 2, 2, 4
        args.test_worlds, args.eval_every, args.handoff_worlds = 20, 1, 10
        args.iterations = 3
        args.work = args.work.with_name(args.work.name + "_quick")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = parse(argv)
    if args.runs:
        command = "python bench/rl_loop.py " + " ".join(sys.argv[1:] if argv is None else argv)
        dirs = [Path(p) for p in args.runs.split(",")]
        result = from_runs(dirs, command, probe_kl=not args.no_kl_probe)
        if args.process_runs:
            result = with_process_arm(result, [Path(p) for p in args.process_runs.split(",")])
        if args.early_stop_runs:
            stopping = [Path(p) for p in args.early_stop_runs.split(",")]
            result = with_early_stop_arm(result, stopping)
        if args.handoff_runs:
            result["handoff_by_run"] = runs_handoff(result, args.handoff_runs, args.handoff_worlds)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))
        print(runs_table(result), flush=True)
        return 0
    if args.summarize:
        command = "python bench/rl_loop.py " + " ".join(sys.argv[1:] if argv is None else argv)
        result = resummarize(args.summarize, command)
        args.summarize.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))
        print(table(result), flush=True)
        return 0
    started = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    base = args.base
    if base is None:
        sft = SFTConfig(threads=1, save_every=10_000)
        if args.quick:
            sft = SFTConfig(
                steps=150, batch_size=8, lr=3e-3, warmup=20, hidden=48, layers=2, heads=2, threads=1
            )
        base = train_base(args.work, 40 if args.quick else 400, sft)
    sft_success = heldout_success(base, args.test_worlds)
    print(f"sft held-out {sft_success}", file=sys.stderr, flush=True)
    config = RLConfig(
        iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group,
        lr=args.lr, eval_every=args.eval_every, eval_tasks=args.test_worlds, threads=1,
        concurrency=args.concurrency,
    )  # fmt: skip
    compared = config.model_copy(update={"iterations": args.compared_iterations or args.iterations})
    per_iteration = args.tasks * args.group
    kinds, dirs = {}, {}
    given = {"outcome": [Path(p) for p in args.outcome_runs.split(",") if p]}
    for kind in KINDS:
        arm = config if kind == "outcome" else compared
        made = run_kind(kind, base, args.work, args.seeds, arm, given.get(kind, []))
        kinds[kind], dirs[kind] = summarize(made["rows"], sft_success, per_iteration), made["dirs"]
    after = args.early_stop_after or max(1, compared.iterations // 4)
    stop_config = compared.model_copy(update={"early_stop_after": after})
    stopping = run_kind(EARLY, base, args.work, args.early_stop_seeds, stop_config)["rows"]
    kinds[EARLY] = summarize(stopping, sft_success, per_iteration)
    checkpoints = {"sft": base}
    for kind in args.handoff_kinds.split(","):
        last = kinds[kind]["iterations"][0][-1]["iteration"]
        checkpoints[f"rl-{kind}"] = dirs[kind][0] / f"iter-{last:04d}"
    handoff = handoff_matrix(checkpoints, args.handoff_worlds)
    target = kinds["outcome"]["success"]
    result = {
        "command": "python bench/rl_loop.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "quick": args.quick,
        "label": "held-out household difficulty-1 worlds (seeds >= 1,000,000), greedy, 20 steps",
        "sft": {
            "success": sft_success["rate"],
            "success_ci": sft_success["ci"],
            "n": sft_success["n"],
            "checkpoint": str(base),
        },
        "outcome": kinds["outcome"],
        "process": kinds["process"],
        "correlation_min": min(k["correlation_min"] for k in kinds.values()),
        "process_episodes_to_outcome_final": episodes_to_reach(kinds["process"]["curve"], target),
        "outcome_episodes_to_outcome_final": episodes_to_reach(kinds["outcome"]["curve"], target),
        "at_equal_episodes": at_equal_episodes(kinds),
        "handoff": handoff,
        "early_stop": {
            **early_stop(kinds["outcome"]["iterations"], stopping, after),
            "monitors": [
                orjson.loads(p.read_bytes())
                for p in sorted(args.work.glob(f"{EARLY}-seed*/monitor.json"))
            ],
            "heldout_final": {k: kinds[EARLY][k] for k in ("success", "success_ci")},
            "outcome_same_seeds_then": same_seeds_then(kinds["outcome"], kinds[EARLY]),
        },
        EARLY: kinds[EARLY],
        "settings": {
            **vars(args),
            "work": str(args.work),
            "out": str(args.out),
            "base": str(base),
            "rl": config.model_dump(),
            "rl_compared_arms": compared.model_dump(),
        },
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))
    print(table(result), flush=True)
    return 0


def resummarize(path: Path, command: str) -> dict[str, Any]:
    """A result file's summaries made again from the iteration rows it keeps (after a change
    to how they are summarised); the command is added to the file's `commands`."""
    result = orjson.loads(path.read_bytes())
    sft = result["sft"]
    wins = round(sft["success"] * sft["n"])
    sft_rate = {"successes": wins, "n": sft["n"], "rate": sft["success"], "ci": sft["success_ci"]}
    per_iteration = result["settings"]["tasks"] * result["settings"]["group"]
    kinds = {
        kind: summarize(result[kind]["iterations"], sft_rate, per_iteration)
        for kind in (*KINDS, EARLY)
    }
    target = kinds["outcome"]["success"]
    after = result["early_stop"]["monitor_after_iterations"]
    result.update({kind: kinds[kind] for kind in kinds})
    result["correlation_min"] = min(k["correlation_min"] for k in kinds.values())
    for kind in KINDS:
        reached = episodes_to_reach(kinds[kind]["curve"], target)
        result[f"{kind}_episodes_to_outcome_final"] = reached
    result["at_equal_episodes"] = at_equal_episodes(kinds)
    result["early_stop"].update(
        early_stop(kinds["outcome"]["iterations"], kinds[EARLY]["iterations"], after),
        heldout_final={k: kinds[EARLY][k] for k in ("success", "success_ci")},
        outcome_same_seeds_then=same_seeds_then(kinds["outcome"], kinds[EARLY]),
    )
    result["commands"] = [*result.get("commands", [result["command"]]), command]
    return result


PER_RUN = ("seed", "threads")
"""Settings the runs of one arm may differ in: the seed, and torch's thread count (runs
sharing a machine take one each; a resumed run may take another)."""
SIGNAL = ("reward", "zero_variance_groups", "advantage_tokens", "entropy", "kl", "clipped")


def read_runs(dirs: list[Path], option: str = "--runs") -> list[dict]:
    """The `rl.json` of runs of one base and one setting (but for the `PER_RUN` settings),
    each of which evaluated the same start."""
    from trajforge.train.rl.checkpoints import read_run

    runs = [read_run(d) for d in dirs]
    settings = [{k: v for k, v in r["config"].items() if k not in PER_RUN} for r in runs]
    same = [
        r["base"] == runs[0]["base"] and s == settings[0]
        for r, s in zip(runs, settings, strict=True)
    ]
    if not all(same):
        raise SystemExit(f"{option}: {dirs} differ in base or settings (other than {PER_RUN})")
    if any(r["initial"] != runs[0]["initial"] for r in runs) or runs[0]["initial"] is None:
        raise SystemExit(f"{option}: each run must have evaluated the same start (--eval-every)")
    return runs


def from_runs(dirs: list[Path], command: str, *, probe_kl: bool = True) -> dict[str, Any]:
    """An outcome arm summarised from `train rl` runs of one base and one setting (with
    `probe_kl`, where the first run's iteration-1 KL sits: `kl_tail`)."""
    from trajforge.train.rl.checkpoints import rebuild_log

    runs = read_runs(dirs)
    if probe_kl and runs[0]["config"]["reward"] != "outcome":
        raise SystemExit("--runs: the KL probe recomputes outcome advantages; these are not")
    rows = [rebuild_log(d) for d in dirs]
    config, start = runs[0]["config"], runs[0]["initial"]
    per_iteration = config["tasks_per_iteration"] * config["group_size"]
    outcome = summarize(rows, start, per_iteration)
    return {
        "command": command,
        "label": "held-out household difficulty-1 worlds (seeds >= 1,000,000), greedy, 20 steps",
        "runs": [str(d) for d in dirs],
        "seeds": [r["config"]["seed"] for r in runs],
        "base": runs[0]["base"],
        "rl": {k: v for k, v in config.items() if k not in PER_RUN},
        "sft": {
            "success": start["rate"],
            "success_ci": start["ci"],
            "n": start["n"],
            "successes": start["successes"],
            "checkpoint": runs[0]["base"],
        },
        "outcome": outcome,
        "correlation_min": outcome["correlation_min"],
        "signal_by_iteration": signal(rows),
        "kl_tail_iteration_1": kl_tail(dirs[0], Path(runs[0]["base"])) if probe_kl else None,
    }


def compared_arm(result: dict[str, Any], dirs: list[Path], option: str, setting: str) -> dict:
    """The runs in `dirs`, checked against the outcome runs of `result` (from `from_runs`):
    the same base, start and settings but `setting`. Returns the arm summarised (`arm`), its
    rows, seeds and `setting`, and the outcome runs of the same seeds summarised (`paired`)."""
    from trajforge.train.rl.checkpoints import rebuild_log

    runs = read_runs(dirs, option)
    config, start = runs[0]["config"], runs[0]["initial"]
    if runs[0]["base"] != result["base"] or start["successes"] != result["sft"]["successes"]:
        raise SystemExit(f"{option}: another base or another start than --runs")
    ours = {k: v for k, v in config.items() if k not in (*PER_RUN, setting)}
    if ours != {k: v for k, v in result["rl"].items() if k != setting}:
        raise SystemExit(f"{option}: settings other than {setting} differ from --runs")
    seeds = [r["config"]["seed"] for r in runs]
    by_seed = dict(zip(result["seeds"], result["outcome"]["iterations"], strict=True))
    if missing := [seed for seed in seeds if seed not in by_seed]:
        raise SystemExit(f"{option}: no outcome run of seed {missing} in --runs")
    per_iteration = config["tasks_per_iteration"] * config["group_size"]
    rows = [rebuild_log(d) for d in dirs]
    return {
        "arm": summarize(rows, start, per_iteration),
        "paired": summarize([by_seed[seed] for seed in seeds], start, per_iteration),
        "rows": rows,
        "seeds": seeds,
        "setting": config[setting],
    }


def with_process_arm(result: dict[str, Any], dirs: list[Path]) -> dict[str, Any]:
    """`result` (from `from_runs`) with a process-guided arm summarised from `dirs`: runs from
    the same base with the outcome arm's settings but the reward. Held against the outcome arm
    at equal episodes twice: on all its seeds, and on the process arm's seeds alone."""
    compared = compared_arm(result, dirs, "--process-runs", "reward")
    if compared["setting"] != "process":
        raise SystemExit(f"--process-runs: {dirs[0]} was trained with another reward")
    process, outcome = compared["arm"], result["outcome"]
    return {
        **result,
        "process": process,
        "process_runs": [str(d) for d in dirs],
        "process_seeds": compared["seeds"],
        "correlation_min": min(outcome["correlation_min"], process["correlation_min"]),
        "process_episodes_to_outcome_final": episodes_to_reach(
            process["curve"], outcome["success"]
        ),
        "outcome_episodes_to_outcome_final": episodes_to_reach(
            outcome["curve"], outcome["success"]
        ),
        "at_equal_episodes": at_equal_episodes({"outcome": outcome, "process": process}),
        "at_equal_episodes_same_seeds": at_equal_episodes(
            {"outcome": compared["paired"], "process": process}
        ),
    }


def with_early_stop_arm(result: dict[str, Any], dirs: list[Path]) -> dict[str, Any]:
    """`result` (from `from_runs`) with an outcome arm whose proxy stopped the rollouts its
    failure monitor flagged (`--early-stop-after`), summarised from `dirs` and held against
    the outcome runs of the same seeds over the iterations both trained."""
    compared = compared_arm(result, dirs, "--early-stop-runs", "early_stop_after")
    if not compared["setting"]:
        raise SystemExit(f"--early-stop-runs: {dirs[0]} ran without --early-stop-after")
    stopping, paired = compared["arm"], compared["paired"]
    monitors = [orjson.loads(p.read_bytes()) for d in dirs if (p := d / "monitor.json").is_file()]
    after, rows = compared["setting"], compared["rows"]
    return {
        **result,
        "early_stop": {
            **early_stop(paired["iterations"], rows, after),
            "compute_saved_by_seed": [
                early_stop([plain], [stopped], after)["compute_saved"]
                for plain, stopped in zip(paired["iterations"], rows, strict=True)
            ],
            "monitors": monitors,
            "heldout_final": {k: stopping[k] for k in ("success", "success_ci")},
            "outcome_same_seeds_then": same_seeds_then(paired, stopping),
        },
        EARLY: stopping,
        "early_stop_runs": [str(d) for d in dirs],
        "correlation_min": min(result["correlation_min"], stopping["correlation_min"]),
    }


def runs_handoff(result: dict[str, Any], runs: int, worlds: int) -> list[dict[str, Any]]:
    """The handoff matrix of the start and the last checkpoint of each of the first `runs`
    summarised runs (the four reacher -> solver pairings), one matrix a run."""
    matrices = []
    for run, rows in zip(result["runs"][:runs], result["outcome"]["iterations"], strict=False):
        last = rows[-1]["iteration"]
        checkpoints = {"sft": Path(result["base"]), "rl-outcome": Path(run) / f"iter-{last:04d}"}
        print(f"handoff: {run} iteration {last}, {worlds} worlds", file=sys.stderr, flush=True)
        matrix = handoff_matrix(checkpoints, worlds)
        matrices.append({"run": run, "iteration": last, **matrix})
    return matrices


def kl_tail(run: Path, base: Path, iteration: int = 1, worst: int = 12) -> dict[str, Any]:
    """Where an iteration's KL to the start sits: the iteration's rollouts (from the run's
    store, with the loop's outcome advantages) scored under the start and under the
    iteration's checkpoint, per model token."""
    from trajforge.train.rl.checkpoints import iteration_dir

    episodes, sequences = _outcome_sequences(run, iteration)
    start = Student(base)
    tokens = _token_kl(start, Student(iteration_dir(run, iteration)), sequences)
    total = sum(k for k, *_ in tokens) or 1.0
    heavy = [x for x in tokens if x[0] > 10]
    mass = [a for s in sequences for a in s.advantages]
    pushed = [  # each sequence's share of the loss: its weight times its mean advantage
        s.weight
        * sum(a for a, m in zip(s.advantages, s.mask, strict=True) if m)
        / max(1, sum(s.mask))
        for s in sequences
    ]
    signs = {"+": lambda a: a > 0, "-": lambda a: a < 0, "0": lambda a: a == 0}
    return {
        "iteration": iteration,
        "episodes": episodes,
        "sequences": len(sequences),
        "model_tokens": len(tokens),
        "advantage_mass_positive": round(sum(a for a in mass if a > 0), 1),
        "advantage_mass_negative": round(sum(a for a in mass if a < 0), 1),
        "loss_advantage_positive": round(sum(p for p in pushed if p > 0), 2),
        "loss_advantage_negative": round(sum(p for p in pushed if p < 0), 2),
        **_concentration(sequences),
        "mean_k3": round(total / max(1, len(tokens)), 3),
        "top_1_percent_share": round(sum(k for k, *_ in tokens[: len(tokens) // 100]) / total, 4),
        "tokens_k3_over_10": len(heavy),
        "their_advantage_sign": {
            sign: sum(1 for *_, seq, t in heavy if test(seq.advantages[t]))
            for sign, test in signs.items()
        },
        "worst": [
            {
                "token": _text(start.codec, seq.ids[t]),
                "after": _text(start.codec, seq.ids[t - 1]),
                "logprob_start": round(ref, 3),
                "logprob_after": round(new, 3),
                "advantage": round(seq.advantages[t], 3),
            }
            for _, ref, new, seq, t in tokens[:worst]
        ],
    }


SHORT = 16
"""Model tokens of a short sequence (about two tool calls of the tiny student)."""


def _concentration(sequences: list) -> dict[str, Any]:
    """How the loss is spread over model tokens: a sequence's loss is the mean over its
    model tokens times its weight, so a token of a short sequence (an episode cut at a drift
    point leaves pieces of one or two turns) weighs more than one of a whole episode."""
    counts = [max(1, sum(s.mask)) for s in sequences]
    weight = sum(s.weight for s in sequences) or 1.0
    short = [(s, n) for s, n in zip(sequences, counts, strict=True) if n <= SHORT]
    return {
        "model_tokens_per_sequence_median": statistics.median(counts) if counts else None,
        "short_sequences": len(short),
        "short_sequences_loss_share": round(sum(s.weight for s, _ in short) / weight, 4),
        "short_sequences_token_share": round(sum(n for _, n in short) / max(1, sum(counts)), 4),
    }


def _attempt(traj: Any) -> int:
    """When the loop started the rollouts of the episode's iteration (its session name is
    `itNNNN-<start time in ns, hex>-<task>-<sample>`)."""
    return int(traj.source.run.split("-")[1], 16)


def _outcome_sequences(run: Path, iteration: int) -> tuple[int, list]:
    """The iteration's recorded episodes as the loop's training sequences, outcome advantages
    and the run's weighting (groups: the session name less its sample index). An iteration
    rolled out again after its run was stopped holds its episodes twice: the last attempt's
    count."""
    from trajforge.export.rl import rl_samples
    from trajforge.store import Store
    from trajforge.train.rl.advantages import training_sequences
    from trajforge.train.rl.checkpoints import read_run
    from trajforge.train.rl.rollouts import Episode

    with Store(run / "rollouts.db") as store:
        attempts = [t for t in store.query() if t.source.run.startswith(f"it{iteration:04d}-")]
    last = max((_attempt(t) for t in attempts), default=None)
    mine = [t for t in attempts if _attempt(t) == last]
    episodes = [
        Episode(t.source.run, t.source.run.rsplit("-", 1)[0], t, t, list(rl_samples(t)))
        for t in mine
    ]
    config = RLConfig(**read_run(run)["config"]).model_copy(update={"reward": "outcome"})
    return len(mine), training_sequences(episodes, config)


def _token_kl(start: Student, after: Student, sequences: list) -> list[tuple]:
    """(k3, logprob at the start, logprob after, sequence, position) of every model token,
    largest k3 first."""
    import math

    import torch

    from trajforge.train.rl.grpo import passes, token_logprobs

    tokens = []
    with torch.no_grad():
        for batch in passes(sequences):
            ref = token_logprobs(start.model, batch, start.codec.pad_id)
            new = token_logprobs(after.model, batch, start.codec.pad_id)
            for row, seq in enumerate(batch):
                for t in (t for t, m in enumerate(seq.mask) if m):
                    before, later = float(ref[row, t]), float(new[row, t])
                    delta = before - later
                    tokens.append((math.exp(delta) - delta - 1, before, later, seq, t))
    return sorted(tokens, key=lambda x: x[0], reverse=True)


def _text(codec: Any, token: int) -> str:
    inverse = getattr(codec, "inverse", None)
    return inverse.get(token, "?") if inverse is not None else codec.tokenizer.decode([token])


def signal(runs: list[list[dict]]) -> list[dict[str, Any]]:
    """Per iteration, the mean over seeds of what the update had to learn from."""
    out = []
    for iteration in sorted({r["iteration"] for rows in runs for r in rows}):
        found = [r for rows in runs for r in rows if r["iteration"] == iteration]
        means = {
            key: round(sum(r[key] for r in found) / len(found), 4)
            for key in SIGNAL
            if all(r.get(key) is not None for r in found)
        }
        out.append({"iteration": iteration, "seeds": len(found), **means})
    return out


def runs_table(result: dict[str, Any]) -> str:
    lines = [f"{'arm':<10}{'iter':>6}{'episodes':>10}{'success':>10}  95% CI  by seed"]
    for kind in (k for k in KINDS if k in result):
        for p in result[kind]["curve"]:
            head = f"{kind:<10}{p['iteration']:>6}{p['episodes']:>10}{p['success']:>10.3f}"
            lines.append(f"{head}  {p['success_ci']}  {p['success_by_seed']}")
    lines.append(f"{'iter':>6}" + "".join(f"{k:>22}" for k in SIGNAL))
    for row in result["signal_by_iteration"]:
        cells = "".join(f"{row.get(k, float('nan')):>22.4f}" for k in SIGNAL)
        lines.append(f"{row['iteration']:>6}{cells}")
    lines.append(f"correlation min {result['correlation_min']:.6f}")
    for key in ("at_equal_episodes", "at_equal_episodes_same_seeds"):
        if equal := result.get(key):
            lines.append(equal_line(key, equal))
    if stop := result.get("early_stop"):
        lines.append(early_stop_line(stop))
    for matrix in result.get("handoff_by_run", []):
        lines.append(f"handoff, {matrix['run']} iteration {matrix['iteration']}:")
        lines += handoff_lines(matrix)
    tail = result["kl_tail_iteration_1"]
    if tail is None:
        return "\n".join(lines)
    lines.append(
        f"iteration 1 KL: mean k3 {tail['mean_k3']}, top 1% of tokens {tail['top_1_percent_share']}"
        f", advantage mass +{tail['advantage_mass_positive']} / {tail['advantage_mass_negative']}"
        f" (in the loss +{tail['loss_advantage_positive']} / {tail['loss_advantage_negative']})"
    )
    return "\n".join(lines)


def table(result: dict[str, Any]) -> str:
    lines = [f"{'arm':<10}{'iter':>6}{'episodes':>10}{'success':>10}  95% CI"]
    for kind in KINDS:
        for p in result[kind]["curve"]:
            head = f"{kind:<10}{p['iteration']:>6}{p['episodes']:>10}"
            lines.append(f"{head}{p['success']:>10.3f}  {p['success_ci']}")
    lines.append(f"correlation min {result['correlation_min']:.6f}")
    if equal := result.get("at_equal_episodes"):
        lines.append(equal_line("at_equal_episodes", equal))
    lines.append("handoff (REACH@k / SOLVE / end-to-end):")
    return "\n".join(lines + handoff_lines(result["handoff"]))


def early_stop_line(stop: dict[str, Any]) -> str:
    final, then = stop["heldout_final"], stop["outcome_same_seeds_then"]
    return (
        f"early stop after {stop['monitor_after_iterations']} iterations, "
        f"{stop['compared_iterations']} iterations compared: episode-steps "
        f"{stop['episode_steps_with']} against {stop['episode_steps_without']} "
        f"(saved {stop['compute_saved']}), {stop['stopped_episodes']} of {stop['episodes']} "
        f"episodes stopped; held-out {final['success']:.3f} {final['success_ci']} against "
        f"{then['success']:.3f} {then['success_ci']} at iteration {then['iteration']}"
    )


def equal_line(key: str, equal: dict[str, Any]) -> str:
    process, outcome = equal["process"], equal["outcome"]
    return (
        f"{key}, {equal['episodes']} episodes: process {process['success']:.3f} "
        f"{process['success_ci']}, outcome {outcome['success']:.3f} {outcome['success_ci']} "
        f"({equal['process_minus_outcome']:+.3f})"
    )


def handoff_lines(matrix: dict[str, Any]) -> list[str]:
    lines = []
    for pair, cell in matrix["pairs"].items():
        reach = f"reach {cell['reach']:.3f} {cell['reach_ci']}"
        lines.append(f"  {pair:<28} {reach}  solve {cell['solve']}  e2e {cell['end_to_end']:.3f}")
    return lines


if __name__ == "__main__":
    sys.exit(main())

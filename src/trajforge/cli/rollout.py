"""`trajforge rollout`, `trajforge robustness` and `trajforge rft`: batches of episodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trajforge.cli.common import DbOption, JsonOption, console, open_store, print_json
from trajforge.cli.options import Offer, PolicyFlags, StrategyFlags, option_sets
from trajforge.envs.faults import check_tools, parse_fault_spec
from trajforge.evaluate.robustness import ConditionReport, KindReport, run_robustness
from trajforge.generate.rft import RFTConfig, rft_dataset
from trajforge.progress import ProgressLines
from trajforge.rollout.backends import BACKENDS
from trajforge.rollout.episode import Limits
from trajforge.rollout.factory import AgentSpec, PolicyOptions, build, make_env
from trajforge.rollout.runner import (
    BatchSummary,
    FinishedEpisode,
    Progress,
    RolloutConfig,
    run_episodes,
)
from trajforge.rollout.tasks import select_tasks
from trajforge.schema import Trajectory

EnvArg = Annotated[str, typer.Option("--env", help="Environment name (household, swe, tau-...).")]
TasksArg = Annotated[
    str, typer.Option("--tasks", help="N (first N tasks), A-B (a range) or a JSON/JSONL file.")
]
PolicyArg = Annotated[
    str, typer.Option("--policy", help="expert, noisy-expert, llm, replay, or module:Class.")
]
SamplesArg = Annotated[int, typer.Option("--n", min=1, help="Samples per task.")]
FaultsArg = Annotated[
    list[str] | None,
    typer.Option("--faults", help="KIND[:RATE][@TOOL,...]; repeat or join with commas."),
]
ConcurrencyArg = Annotated[int, typer.Option("--concurrency", min=1, help="Parallel episodes.")]
BackendArg = Annotated[str, typer.Option("--backend", help="local or ray.")]
SeedArg = Annotated[int, typer.Option("--seed", help="Batch seed (policies and faults).")]
MaxStepsArg = Annotated[int, typer.Option("--max-steps", help="Assistant steps per episode.")]
MaxTokensArg = Annotated[int | None, typer.Option("--max-tokens", help="Model tokens at most.")]
MaxWallArg = Annotated[float | None, typer.Option("--max-wall", help="Seconds per episode.")]
RunArg = Annotated[str | None, typer.Option("--run", help="Run name stored with each episode.")]


@dataclass(frozen=True)
class BatchFlags:
    """How a batch runs: parallelism, backend, seed and the limits of each episode."""

    concurrency: ConcurrencyArg = 1
    backend: BackendArg = "local"
    seed: SeedArg = 0
    max_steps: MaxStepsArg = 50
    max_tokens: MaxTokensArg = None
    max_wall: MaxWallArg = None

    def limits(self) -> Limits:
        return Limits(
            max_steps=self.max_steps, max_tokens=self.max_tokens, max_wall_s=self.max_wall
        )


# the batch flags of the commands that limit episodes by steps only
StepLimitedBatch = Annotated[BatchFlags, Offer(without=("max_tokens", "max_wall"))]


class ProgressReport(Progress):
    """The runner's events as progress lines: episodes done, running, success among those
    judged, model errors, tokens/s."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.lines: ProgressLines | None = None
        self.judged = self.successes = self.model_errors = 0

    def start(self, total: int, skipped: int) -> None:
        title = self.title + (f" ({skipped} done before)" if skipped else "")
        self.lines = ProgressLines(title, total, "episode")
        self.lines.update(skipped, running=0, success="-")

    def running(self, count: int) -> None:
        if self.lines is not None:
            self.lines.fields["running"] = count

    def done(self, episode: FinishedEpisode) -> None:
        if self.lines is None:
            return
        if episode.model_failure is not None:
            self.model_errors += 1
            self.lines.fields["model errors"] = self.model_errors
        else:
            self.judged += 1
            self.successes += bool(episode.success)
            self.lines.fields["success"] = f"{self.successes / self.judged:.0%}"
        self.lines.count("tok", episode.tokens)
        self.lines.advance()

    def finish(self) -> None:
        if self.lines is not None:
            self.lines.finish()


def build_config(
    env: str,
    tasks: str,
    policy: str,
    n: int,
    faults: list[str] | None,
    batch: BatchFlags,
    options: PolicyOptions,
    run: str | None = None,
) -> RolloutConfig:
    """Validate the options (faults first: they fail fastest) and select the tasks."""
    spec = parse_fault_spec(faults or [])
    build(AgentSpec(policy=policy, options=options), batch.seed)  # unknown names fail here, once
    environment = make_env(env)
    check_tools(spec, environment)
    selected = select_tasks(environment, tasks)
    return RolloutConfig(
        env=env,
        tasks=selected,
        policy=policy,
        options=options,
        n=n,
        faults=faults or [],
        seed=batch.seed,
        limits=batch.limits(),
        run=run,
    )


def execute(
    config: RolloutConfig, db: Path | None, batch: BatchFlags
) -> tuple[BatchSummary, list[FinishedEpisode]]:
    """Run a batch into the store, with progress lines on stderr."""
    run_on, concurrency = BACKENDS.get(batch.backend), batch.concurrency
    title = f"{config.env} · {config.policy}" + (
        f" · {','.join(config.faults)}" if config.faults else ""
    )
    report = ProgressReport(title)
    with open_store(db, must_exist=False) as store:
        result = run_episodes(config, store, run_on, concurrency, report)
    report.finish()
    return result


@option_sets
def rollout_command(
    env: EnvArg,
    tasks: TasksArg = "10",
    policy: PolicyArg = "expert",
    n: SamplesArg = 1,
    faults: FaultsArg = None,
    batch: BatchFlags = BatchFlags(),
    llm: PolicyFlags = PolicyFlags(),
    guidance: StrategyFlags = StrategyFlags(),
    run: RunArg = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run a policy on tasks of an environment (optionally with tool faults) into the store."""
    from trajforge.models.retry import require_an_answer

    config = build_config(env, tasks, policy, n, faults, batch, llm.options(), run)
    if guidance.strategies:
        options = guidance.guided(config.options, db, config.tasks)
        config = config.model_copy(update={"options": options})
    summary, episodes = execute(config, db, batch)
    if json_out:
        print_json(summary.model_dump())
    else:
        print_summary(summary)
    require_an_answer([e.model_failure for e in episodes], what="episode")


def print_summary(summary: BatchSummary, out: Console | None = None) -> None:
    """The batch summary as a table."""
    table = Table(title="rollout")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in summary.model_dump().items():
        if key == "success_rate":
            value = f"{value:.1%}"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        table.add_row(key.replace("_", " "), str(value))
    (out or console).print(table)


@option_sets
def rft_command(
    env: EnvArg,
    out: Annotated[Path, typer.Option("--out", help="Output folder (train.jsonl, yield.json).")],
    tasks: TasksArg = "10",
    policy: PolicyArg = "noisy-expert",
    k: Annotated[int, typer.Option("--k", min=1, help="Rollouts sampled per task.")] = 4,
    similarity: Annotated[
        float, typer.Option("--similarity", help="Drop samples at least this similar.")
    ] = 0.9,
    pairs: Annotated[
        bool,
        typer.Option(
            "--pairs", help="Also write preference pairs: kept vs failed samples of a task."
        ),
    ] = False,
    batch: StepLimitedBatch = BatchFlags(),
    llm: PolicyFlags = PolicyFlags(temperature=0.7),
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Sample K rollouts per task, keep verified successes without near-duplicates, write SFT."""
    config = build_config(env, tasks, policy, k, None, batch, llm.options(), run="rft")
    _, episodes = execute(config, db, batch)
    trajs = [episode.trajectory() for episode in episodes]
    result = rft_dataset(trajs, env, out, RFTConfig(similarity=similarity, pairs=pairs))
    summary = result.summary()
    if json_out:
        print_json(summary)
        return
    table = Table(title=f"RFT yield → {', '.join(str(p) for p in result.data)}")
    for column in ("task", "sampled", "successes", "verified", "kept"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for row in result.report:
        table.add_row(
            row.task, *(str(v) for v in (row.sampled, row.successes, row.verified, row.kept))
        )
    console.print(table)
    console.print(
        f"kept {summary['kept']} of {summary['sampled']} ({summary['yield']:.1%}): "
        f"{summary['rows']} training rows ({summary['pairs']} preference pairs), "
        f"{summary['learned_turns']} turns learned, "
        f"{summary['masked_turns']} labelled mistakes kept as context only"
    )


DEFAULT_CONDITIONS = ["transient:0.2", "persistent", "silent:0.2"]


@option_sets
def robustness_command(
    env: EnvArg,
    tasks: TasksArg = "10",
    policy: PolicyArg = "noisy-expert",
    n: SamplesArg = 3,
    faults: Annotated[
        list[str] | None,
        typer.Option("--faults", help="A condition (fault spec); repeat for several."),
    ] = None,
    batch: StepLimitedBatch = BatchFlags(),
    llm: PolicyFlags = PolicyFlags(),
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Compare the same tasks and seeds without and with faults: success, recovery, pass^k."""
    conditions = faults or DEFAULT_CONDITIONS
    for condition in conditions:
        check_tools(parse_fault_spec(condition), make_env(env))
    base = build_config(env, tasks, policy, n, None, batch, llm.options(), run="robustness")

    def run(config: RolloutConfig) -> list[Trajectory]:
        episodes = execute(config, db, batch)[1]
        return [episode.trajectory() for episode in episodes]

    reports = run_robustness(base, conditions, run)
    if json_out:
        print_json([r.model_dump(mode="json") for r in reports])
        return
    console.print(robustness_table(reports))


def robustness_table(reports: list[ConditionReport]) -> Table:
    """The robustness report as one table (a row per condition and fault kind)."""
    samples = max((len(r.pass_k) for r in reports), default=0)
    table = Table(title="fault robustness")
    for column in ("condition", "eps", "success", "kind", "hit", "recovery"):
        text = column in ("condition", "kind")
        table.add_column(column, justify="left" if text else "right", no_wrap=text)
    for k in range(1, samples + 1):
        table.add_column(f"pass^{k}", justify="right")
    for report in reports:
        passes = [_rate(report.pass_k.get(k)) for k in range(1, samples + 1)]
        kinds: list[KindReport | None] = list(report.kinds) or [None]
        for number, kind in enumerate(kinds):
            head = [report.condition, str(report.episodes), _rate(report.success_rate)]
            tail = passes if number == 0 else [""] * samples
            cells = ["-", "-", "-"] if kind is None else [
                kind.kind, str(kind.episodes), _rate(kind.recovery_rate)
            ]  # fmt: skip
            table.add_row(*(head if number == 0 else ["", "", ""]), *cells, *tail)
    return table


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"

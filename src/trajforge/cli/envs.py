"""`trajforge replay`, `trajforge fork` and `trajforge handoff`: runs inside environments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from rich.console import Console
from rich.table import Table

from trajforge.cli.common import DbOption, JsonOption, console, open_store, print_json
from trajforge.cli.options import Endpoint, RunFilter, StrategyFlags, UserOption, option_sets
from trajforge.envs.replay import ReplaySummary, replay_many, state_at
from trajforge.errors import UserError
from trajforge.models.retry import model_failure, require_an_answer
from trajforge.progress import ProgressLines, heartbeat
from trajforge.rollout.episode import Limits
from trajforge.rollout.factory import AgentSpec, ForkPoint, UserKind, build
from trajforge.rollout.fork import ForkOptions, check_fork_index, fork, fork_summary
from trajforge.rollout.handoff import HandoffConfig, HandoffMatrix, run_matrix
from trajforge.schema import Trajectory

PolicyArg = Annotated[
    str, typer.Option("--policy", help="expert, noisy-expert, replay, llm, or module:Class.")
]
SeedArg = Annotated[int, typer.Option("--seed", help="Seed of the noisy expert's mistakes.")]
ErrorRateArg = Annotated[
    float, typer.Option("--error-rate", min=0.0, max=1.0, help="noisy-expert: error rate.")
]
MaxStepsArg = Annotated[int, typer.Option("--max-steps", min=1, help="Assistant steps at most.")]


@dataclass(frozen=True)
class AgentFlags:
    """The agents that continue a run: the noisy expert's seed and rate, the user, the limit."""

    seed: SeedArg = 0
    error_rate: ErrorRateArg = 0.2
    user: UserOption = "scripted"
    max_steps: MaxStepsArg = 50

    def spec(self, policy: str, endpoint: Endpoint) -> AgentSpec:
        kind = next((k for k in get_args(UserKind) if k == self.user), None)
        if kind is None:
            raise UserError(f"--user must be 'scripted' or 'llm', got '{self.user}'")
        options = endpoint.policy_options(self.error_rate)
        return AgentSpec(policy=policy, options=options, user=kind)

    def limits(self) -> Limits:
        return Limits(max_steps=self.max_steps)


@option_sets
def replay_command(
    ids: Annotated[list[str] | None, typer.Argument(help="Trajectory ids (default: all).")] = None,
    db: DbOption = None,
    runs: RunFilter = RunFilter(),
    at: Annotated[
        int | None,
        typer.Option("--at", help="With one id: show the state after the first N messages."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Re-execute the tool calls of stored runs; compare outputs and outcomes (fidelity)."""
    if at is not None:
        _show_state(ids or [], at, db, json_out)
        return
    flt = runs.selection(ids)
    with open_store(db) as store:
        lines = ProgressLines("replay", store.count(flt), "run")
        summary = replay_many(lines.each(store.query(flt)), explicit=bool(ids))
    lines.finish()
    if json_out:
        print_json(summary.model_dump(mode="json"))
        return
    print_replay(summary, console)


def _show_state(ids: list[str], at: int, db: Path | None, json_out: bool) -> None:
    if len(ids) != 1:
        raise UserError("--at needs exactly one trajectory id")
    with open_store(db) as store:
        trajectory = store.get(ids[0])
    report = state_at(trajectory, at)
    if json_out:
        print_json(report)
        return
    console.print(
        f"{trajectory.id} after {at} of {len(trajectory.messages)} messages: "
        f"state {str(report.get('state_hash', '?'))[:12]}, distance {report.get('distance', '?')}",
        markup=False,
    )
    console.print(DISTANCE_LEGEND, markup=False)
    for change in report.get("changed", []):
        console.print(f"  {change['table']} {change['key']}: {change['record']}", markup=False)


DISTANCE_LEGEND = (
    "  (distance: the oracle's count of gold writes still missing, +1 while a required answer is "
    "unsaid; 0 = solved, None = the database left every gold path)"
)


def print_replay(summary: ReplaySummary, console: Console) -> None:
    """The fidelity table (per environment and in total), then one line per mismatch."""
    table = Table(title="replay fidelity")
    for column in ("environment", "runs", "calls", "exact", "exact %", "outcome agree"):
        table.add_column(column, justify="right")
    rows = [*summary.by_environment.items(), ("total", summary.model_dump())]
    for name, totals in rows:
        ratio = f"{100 * totals['exact'] / totals['calls']:.2f}" if totals["calls"] else "-"
        table.add_row(
            name,
            str(totals["runs"]),
            str(totals["calls"]),
            str(totals["exact"]),
            ratio,
            f"{totals['outcome_agree']}/{totals['runs']}",
        )
    console.print(table)
    if summary.skipped or summary.faulted:
        console.print(
            f"skipped {summary.skipped} runs of environments that cannot be replayed "
            f"({', '.join(summary.skipped_environments) or '-'}); "
            f"{summary.faulted} calls with injected faults not compared",
            markup=False,
        )
    for mismatch in summary.mismatches:
        where = "outcome" if mismatch.message_index is None else f"@{mismatch.message_index}"
        console.print(
            f"{mismatch.trajectory_id[:12]} {where} {mismatch.tool or ''}: {mismatch.reason}",
            markup=False,
        )


@option_sets
def fork_command(
    traj_id: Annotated[str, typer.Argument(help="Parent trajectory id or unique prefix.")],
    at: Annotated[int, typer.Option("--at", help="Keep the parent's first N messages.")],
    policy: PolicyArg = "expert",
    agents: AgentFlags = AgentFlags(),
    endpoint: Endpoint = Endpoint(),
    guidance: StrategyFlags = StrategyFlags(),
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Fork a stored run at message N and continue it with a policy; stores the child."""
    spec = agents.spec(policy, endpoint)
    with open_store(db) as store:
        parent = store.get(traj_id)
        check_fork_index(parent, at)
        guided = guidance.guided(spec.options, db, [parent.task])
        spec = spec.model_copy(update={"options": guided})
        policy_obj, chosen_user = build(spec, agents.seed, ForkPoint(parent, at))
        options = ForkOptions(limits=agents.limits())
        with heartbeat("fork", f"continuing {parent.id[:12]} from message {at} with {policy}"):
            child = fork(parent, at, policy_obj, user=chosen_user, options=options)
        with store.transaction():
            store.add(child)
    summary = fork_summary(child)
    if json_out:
        print_json(summary)
    else:
        ended = {summary["status"], summary["termination_reason"] or "?"}
        console.print(
            f"forked {summary['parent'][:12]} at {at} with {policy}: child {child.id} "
            f"({summary['n_messages']} messages, {', '.join(sorted(ended))})",
            markup=False,
        )
    require_an_answer([model_failure(child)], what="fork")


@option_sets
def handoff_command(
    env: Annotated[str, typer.Option("--env", help="Environment (tau-retail, tau-airline...).")],
    reacher: Annotated[list[str], typer.Option("--reacher", help="Reacher policy (repeat).")],
    solver: Annotated[list[str], typer.Option("--solver", help="Solver policy (repeat).")],
    k: Annotated[int, typer.Option("--k", min=0, help="Hand off within k actions of success.")] = 1,
    at: Annotated[
        int | None, typer.Option("--at", min=0, help="Hand off after N reacher steps.")
    ] = None,
    tasks: Annotated[
        int | None, typer.Option("--tasks", help="First N tasks (default all).")
    ] = None,
    agents: AgentFlags = AgentFlags(),
    endpoint: Endpoint = Endpoint(),
    save: Annotated[
        bool, typer.Option("--save", help="Store the reacher and solver runs (in --db).")
    ] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """REACH / SOLVE / end-to-end of reacher → solver handoffs over an environment's tasks."""
    specs = {name: agents.spec(name, endpoint) for name in [*reacher, *solver]}
    config = HandoffConfig(k=k, at=at, limits=agents.limits())
    runs: list[Trajectory] | None = [] if save else None
    lines = ProgressLines(f"handoff {env}", None, "handoff")
    matrix = run_matrix(
        env, reacher, solver, specs, config, tasks, collect=runs, seed=agents.seed, progress=lines
    )
    lines.finish()
    if runs:
        with open_store(db, must_exist=False) as store, store.transaction():
            store.add_many(runs)
    if json_out:
        print_json(matrix.to_json())
        return
    print_matrix(matrix, console)


def print_matrix(matrix: HandoffMatrix, console: Console) -> None:
    """The reacher × solver table of REACH / SOLVE / end-to-end."""
    point = f"at step {matrix.at}" if matrix.at is not None else f"k={matrix.k}"
    table = Table(title=f"handoff on {matrix.env} ({matrix.tasks} tasks, {point})")
    table.add_column("reacher \\ solver")
    solvers = list(dict.fromkeys(r.solver for r in matrix.results))
    for solver in solvers:
        table.add_column(solver, justify="right")
    for reacher in dict.fromkeys(r.reacher for r in matrix.results):
        cells = [_cell(matrix.cell(reacher, solver)) for solver in solvers]
        table.add_row(reacher, *cells)
    console.print(table)
    console.print("cells: REACH / SOLVE / end-to-end success")


def _cell(result: Any) -> str:
    solve = "-" if result.solve is None else f"{result.solve:.2f}"
    return f"{result.reach:.2f} / {solve} / {result.end_to_end:.2f}"

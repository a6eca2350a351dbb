"""`trajforge recover`: guided recovery of failed runs into clean passing demonstrations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import DbOption, JsonOption, console, open_store, print_json
from trajforge.cli.options import (
    Endpoint,
    RunFilter,
    RunFilterNoOutcome,
    StrategyFlags,
    UserOption,
    option_sets,
)
from trajforge.progress import ProgressLines

SourceArg = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        help="Guidance source, in order (repeat): correction, strategies, privileged, llm. "
        "Default: all, strategies only with --strategies K, llm only with an endpoint.",
    ),
]
StartArg = Annotated[
    list[str] | None,
    typer.Option("--start", help="Where the teacher starts (repeat): decisive, start."),
]


@option_sets
def recover_command(
    db: DbOption = None,
    runs: RunFilterNoOutcome = RunFilter(),
    ids: Annotated[list[str] | None, typer.Option("--id", help="Only these runs.")] = None,
    teacher: Annotated[
        str, typer.Option("--teacher", help="Teacher policy: llm, expert, or module:Class.")
    ] = "llm",
    user: UserOption = "scripted",
    source: SourceArg = None,
    start: StartArg = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="LLM guidance rounds (K).")] = 3,
    intervene: Annotated[
        bool, typer.Option("--intervene/--no-intervene", help="Run intervene-and-replay too.")
    ] = True,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="Teacher steps.")] = 40,
    out: Annotated[Path | None, typer.Option("--out", help="Write recovered.jsonl here.")] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Store the demos.")] = True,
    endpoint: Endpoint = Endpoint(),
    guidance: StrategyFlags = StrategyFlags(),
    json_out: JsonOption = False,
) -> None:
    """Search guidance that makes the teacher pass each failed run; keep clean demos."""
    from trajforge.generate.guided import recover_store, write_recovered
    from trajforge.generate.guided.build import RecoverSetup, build_recovery
    from trajforge.strategies.run import RetrievedStrategies

    setup = RecoverSetup(
        teacher=teacher,
        user=user,
        sources=source,
        starts=start or ["decisive", "start"],
        rounds=rounds,
        intervene=intervene,
        max_steps=max_steps,
        base_url=endpoint.base_url,
        llm_model=endpoint.llm_model,
        api_key=endpoint.api_key,
    )
    flt = runs.selection(ids, outcome="failure")
    with open_store(db) as store:
        strategies = (
            RetrievedStrategies.from_store(store, guidance.strategies, guidance.retriever)
            if guidance.strategies
            else None
        )
        recovery = build_recovery(setup, strategies)
        lines = ProgressLines("recover", store.count(flt), "run")
        lines.update(0)
        report, demos = recover_store(
            store, flt, recovery, save=save, on_run=lambda _: lines.advance()
        )
    lines.finish()
    if out is not None:
        write_recovered(demos, report, out)
    if json_out:
        print_json(report.model_dump(exclude={"results"}))
        return
    console.print(_table(report))
    console.print(
        f"{report.recovered} of {report.failures} failed runs recovered ({report.rate:.1%}); "
        f"intervene-and-replay {report.intervene.recovered} of {report.intervene.tried}; "
        f"{report.leak_rejections} passing attempts rejected as leaks"
        + (f"; demos in {out}" if out else ""),
        markup=False,
    )
    _print_failed_calls(report)


def _print_failed_calls(report) -> None:
    """How many model calls failed every retry, and why (the search went on without them)."""
    if not report.failed_calls:
        return
    console.print(
        f"{report.failed_calls} model calls failed after retries (the search went on):",
        markup=False,
    )
    for result in report.results:
        for failure in result.failed_calls:
            console.print(f"  {result.trajectory_id}: {failure}", markup=False, highlight=False)


def _table(report) -> Table:
    table = Table("environment", "failures", "recovered", "rate", "by source", "intervene")
    for env, row in report.by_environment.items():
        sources = ", ".join(f"{k} {v}" for k, v in row.by_source.items()) or "-"
        table.add_row(
            env,
            str(row.failures),
            str(row.recovered),
            f"{row.rate:.1%}",
            sources,
            f"{row.intervene_recovered}/{row.intervene_tried}",
        )
    return table

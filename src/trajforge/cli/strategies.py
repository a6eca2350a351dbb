"""`trajforge strategies`: distil a task family's runs into strategies, list, show, retrieve."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import DbOption, JsonOption, console, guarded, open_store, print_json
from trajforge.cli.options import Endpoint, RunFilter, option_sets
from trajforge.progress import heartbeat
from trajforge.schema import Strategy, StrategySupport

app = typer.Typer(
    help="Reusable strategies: distil them from runs, inspect them, retrieve them for tasks.",
    no_args_is_help=True,
)

FamilyOption = Annotated[
    str, typer.Option("--family", help="Name of the task family (prefix of strategy names).")
]
SourceOption = Annotated[
    list[str] | None,
    typer.Option("--source", help="contrast (default) and/or llm (needs --base-url); repeat."),
]
RetrieverOption = Annotated[
    str, typer.Option("--retriever", help="lexical (BM25) or embedding (all-MiniLM-L6-v2).")
]


@app.command("distil")
@option_sets
def distil_command(
    family: FamilyOption,
    db: DbOption = None,
    runs: RunFilter = RunFilter(),
    sources: SourceOption = None,
    endpoint: Endpoint = Endpoint(),
    held_out: Annotated[
        float, typer.Option("--held-out", help="Share of tasks held out to check candidates.")
    ] = 0.4,
    min_each: Annotated[
        int, typer.Option("--min-each", help="Held-out runs that follow and break a rule.")
    ] = 2,
    no_save: Annotated[bool, typer.Option("--no-save", help="Report only; store nothing.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Distil strategies from the selected runs (one task family); keep those that runs of
    held-out tasks support, and store them as new versions."""
    guarded(_distil)(
        db, runs, family, sources or ["contrast"], endpoint, held_out, min_each, no_save, json_out
    )


def _distil(db, runs, family, sources, endpoint, held_out, min_each, no_save, json_out) -> None:
    from trajforge.strategies.distil import DistilConfig
    from trajforge.strategies.run import distil_store, proposers

    model = None
    if endpoint.base_url is not None:
        from trajforge.models.openai_compat import OpenAICompatibleModel

        model = OpenAICompatibleModel(endpoint.model_config())
    config = DistilConfig(family=family, held_out=held_out, min_each=min_each)
    with open_store(db) as store, heartbeat("strategies distil", f"distilling {family}"):
        outcome = distil_store(
            store, runs.selection(), proposers(sources, model), config, save=not no_save
        )
    if json_out:
        print_json(outcome.model_dump(mode="json"))
        return
    report = outcome.report
    console.print(
        f"{family}: {report.distil_runs} runs of {report.distil_tasks} tasks distilled, "
        f"{report.held_out_runs} runs of {report.held_out_tasks} held-out tasks to check"
    )
    table = Table("kept", "strategy", "source", "in-sample", "held-out")
    for item in report.judged:
        effect = item.strategy.effect
        assert effect is not None
        table.add_row(
            "yes" if item.kept else "no",
            item.strategy.text,
            item.strategy.source,
            _support(effect.distilled),
            _support(effect.held_out),
        )
    console.print(table)
    console.print(f"stored {len(outcome.stored)} new strategy versions")


def _support(counts: StrategySupport) -> str:
    def rate(wins: int, total: int) -> str:
        return f"{wins}/{total}" if total else "-"

    lift = counts.lift()
    shown = f"{lift:+.2f}" if lift is not None else "n/a"
    return (
        f"followed {rate(counts.followed_successes, counts.followed)}, "
        f"broken {rate(counts.violated_successes, counts.violated)} ({shown})"
    )


@app.command("ls")
def ls_command(
    db: DbOption = None,
    env: Annotated[str | None, typer.Option("--env", help="Only this environment.")] = None,
    json_out: JsonOption = False,
) -> None:
    """The latest version of every stored strategy."""
    guarded(_ls)(db, env, json_out)


def _ls(db, env, json_out) -> None:
    from trajforge.strategies.library import latest

    with open_store(db) as store:
        strategies = latest(store, env)
    if json_out:
        print_json([s.model_dump(mode="json") for s in strategies])
        return
    table = Table("name", "v", "environment", "source", "held-out", "evidence", "text")
    for s in strategies:
        held = _support(s.effect.held_out) if s.effect else "-"
        table.add_row(
            s.name,
            str(s.version),
            s.scope.environment,
            s.source,
            held,
            str(len(s.evidence)),
            s.text,
        )
    console.print(table)


@app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Strategy name or a unique prefix.")],
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """A strategy's versions, where it applies, its evidence and measured effect."""
    guarded(_show)(db, name, json_out)


def _show(db, name, json_out) -> None:
    from trajforge.strategies.library import versions

    with open_store(db) as store:
        found = versions(store, name)
    if json_out:
        print_json([s.model_dump(mode="json") for s in found])
        return
    _print_strategy(found[-1], len(found))


def _print_strategy(s: Strategy, count: int) -> None:
    console.print(f"[bold]{s.name}[/bold] v{s.version} of {count} ({s.source})", highlight=False)
    console.print(s.text, markup=False, highlight=False)
    features = ", ".join(f"{k}={v}" for k, v in s.scope.task_features.items()) or "-"
    console.print(
        f"applies to: {s.scope.environment}; task features {features}; {s.scope.situation}",
        markup=False,
        highlight=False,
    )
    if s.effect is not None:
        console.print(f"in-sample: {_support(s.effect.distilled)}", highlight=False)
        console.print(
            f"held-out ({s.effect.held_out_tasks} tasks): {_support(s.effect.held_out)}",
            highlight=False,
        )
    table = Table("run", "task", "message", "kind", "diagnosis")
    for e in s.evidence:
        confirmed = "decisive here" if e.decisive else ""
        table.add_row(e.trajectory_id[:12], e.task_id, str(e.message_index), e.kind, confirmed)
    console.print(table)


@app.command("retrieve")
def retrieve_command(
    env: Annotated[str, typer.Option("--env", help="Environment of the new tasks.")],
    tasks: Annotated[str, typer.Option("--tasks", help="N, A-B or a JSON/JSONL file.")] = "1",
    k: Annotated[int, typer.Option("--k", min=1, help="Strategies per task.")] = 3,
    kind: RetrieverOption = "lexical",
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """The stored strategies that best match each of some tasks of an environment."""
    guarded(_retrieve)(db, env, tasks, k, kind, json_out)


def _retrieve(db, env, tasks, k, kind, json_out) -> None:
    from trajforge.rollout.tasks import select_tasks
    from trajforge.strategies.run import retrieve_for

    selected = select_tasks(env, tasks)
    with open_store(db) as store, heartbeat("strategies retrieve", f"{kind} retrieval"):
        found = {task.id: retrieve_for(store, task, k, kind) for task in selected}
    if json_out:
        print_json(
            {
                task_id: [
                    {"name": r.strategy.name, "score": r.score, "text": r.strategy.text}
                    for r in hits
                ]
                for task_id, hits in found.items()
            }
        )
        return
    table = Table("task", "score", "strategy", "text")
    for task_id, hits in found.items():
        for hit in hits:
            table.add_row(task_id, f"{hit.score:.3f}", hit.strategy.name, hit.strategy.text)
    console.print(table)

"""`trajforge set`: model, run name and error labels of runs already in the store, logged."""

from __future__ import annotations

import getpass
from collections import Counter
from typing import Annotated

import typer

from trajforge.cli.common import DbOption, JsonOption, console, guarded, open_store, print_json
from trajforge.cli.options import Offer, RunFilter, option_sets
from trajforge.errors import UserError
from trajforge.schema import Label
from trajforge.store import TrajectoryFilter
from trajforge.store.metadata import Actor, MetadataChange, MetadataUpdate, set_metadata

WhereModelOption = Annotated[
    str | None,
    typer.Option("--where-model", help="Only runs whose model contains this (select)."),
]
SelectFilter = Annotated[RunFilter, Offer(options={"model": WhereModelOption})]


def _label(text: str) -> Label:
    """`INDEX[:CATEGORY[:REASON]]` (INDEX a message index, or `run`) as a human label."""
    index, _, rest = text.partition(":")
    category, _, reason = rest.partition(":")
    if index != "run" and not index.isdigit():
        raise UserError(
            f"--label '{text}': start with a message index or 'run' "
            "(INDEX[:CATEGORY[:REASON]], e.g. 6:hallucination:says 11, the tool lists 10)"
        )
    return Label(
        message_index=None if index == "run" else int(index),
        category=category or None,
        reason=reason or None,
        source="human",
    )


def _selection(runs: RunFilter, ids: list[str], where_run: str | None, every: bool):
    flt = runs.selection(ids)
    flt = flt.model_copy(update={"run": where_run})
    if flt == TrajectoryFilter() and not every:
        raise UserError("select the runs to change: ids, filters (see --help), or --all")
    return flt


@option_sets
def set_command(
    ids: Annotated[
        list[str] | None, typer.Argument(help="Trajectory ids or unique prefixes.")
    ] = None,
    db: DbOption = None,
    runs: SelectFilter = RunFilter(),
    where_run: Annotated[
        str | None, typer.Option("--where-run", help="Only runs of this run name (select).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Change every run in the store.")] = False,
    new_model: Annotated[str | None, typer.Option("--model", help="Set this model.")] = None,
    new_run: Annotated[str | None, typer.Option("--run", help="Set this run name.")] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="Add a human error label: INDEX[:CATEGORY[:REASON]] (INDEX: message index or "
            "'run'). Repeatable.",
        ),
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Who makes the change (default: the OS user).")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Set the model, run name or labels of stored runs (by id or filter), in one transaction.

    Every change is logged in the store with who, when, the command, and the old value
    (`trajforge show ID` lists them). A run keeps its id.
    """
    guarded(_set)(
        db,
        lambda: _selection(runs, ids or [], where_run, every),
        lambda: MetadataUpdate(
            model=new_model, run=new_run, labels=[_label(text) for text in labels or []]
        ),
        by or getpass.getuser(),
        json_out,
    )


def describe(flt: TrajectoryFilter) -> str:
    """The selection as logged: `trajforge set (env=tau-retail, success=False)`."""
    given = flt.model_dump(exclude_defaults=True)
    parts = [f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in given.items()]
    return f"trajforge set ({', '.join(parts) or 'all runs'})"


def _set(db, make_selection, make_update, by: str, json_out: bool) -> None:
    flt, update = make_selection(), make_update()
    actor = Actor(by, describe(flt))
    with open_store(db) as store:
        selected, changes = set_metadata(store, flt, update, actor)
    changed = len({c.trajectory_id for c in changes})
    if json_out:
        print_json(
            {
                "selected": selected,
                "changed": changed,
                "changes": [
                    {k: v for k, v in c._asdict().items() if k != "command"} for c in changes
                ],
            }
        )
        return
    console.print(
        f"{changed} of {selected} selected runs changed; {len(changes)} changes logged",
        markup=False,
    )
    for line in summary_lines(changes):
        console.print(f"  {line}", markup=False)


def summary_lines(changes: list[MetadataChange]) -> list[str]:
    """One line per field: how many runs, to what, from what."""
    lines = []
    for field in ("model", "run", "labels"):
        of_field = [c for c in changes if c.field == field]
        if not of_field:
            continue
        if field == "labels":
            lines.append(f"labels: added on {len(of_field)} runs")
            continue
        new = Counter(str(c.new_value) for c in of_field)
        old = Counter("unknown" if c.old_value is None else str(c.old_value) for c in of_field)
        lines.append(f"{field}: {_counts(new)} on {len(of_field)} runs (was: {_counts(old)})")
    return lines


SHOWN_VALUES = 4


def _counts(counter: Counter) -> str:
    shown = [f"{value} {n}" for value, n in counter.most_common(SHOWN_VALUES)]
    rest = len(counter) - SHOWN_VALUES
    return ", ".join(shown) + (f" and {rest} other values" if rest > 0 else "")

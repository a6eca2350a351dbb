"""`trajforge ls` and `trajforge show`: list and read stored trajectories."""

from __future__ import annotations

import itertools
import pickle
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    ParquetOption,
    console,
    open_runs,
    open_store,
    print_json,
    print_json_items,
)
from trajforge.cli.options import RunFilter, option_sets
from trajforge.cli.render import render_diagnoses, render_metadata_changes, render_trajectory
from trajforge.store import TrajectoryRow


@option_sets
def ls_command(
    db: DbOption = None,
    runs: RunFilter = RunFilter(),
    json_out: JsonOption = False,
    parquet: ParquetOption = None,
) -> None:
    """List stored trajectories (one line each)."""
    flt = runs.selection()
    with open_runs(db, parquet) as source:
        rows = source.iter_rows(flt)
        if json_out:
            print_json_items(map(_row_json, rows))
            return
        first = list(itertools.islice(rows, RICH_TABLE_ROWS + 1))
        if len(first) <= RICH_TABLE_ROWS:
            console.print(_rows_table(first))
        else:
            sys.stdout.writelines(_plain_rows(itertools.chain(first, rows)))


RICH_TABLE_ROWS = 200
"""Longer listings print plain aligned rows: rich's table layout grows slow with many rows.
Listings are printed as the rows are read, so memory stays the same whatever their length."""
_COLUMNS = ("id", "source", "model", "env", "task", "outcome", "steps", "tokens")
_OUTCOMES = {"success": "success", "failure": "failure", "model_error": "model error",
             "unjudged": "?"}  # fmt: skip


def _row_cells(row: TrajectoryRow) -> tuple[str, ...]:
    return (
        row.id,
        row.harness or "",
        row.model or "",
        row.environment or "",
        row.task_id or "",
        _OUTCOMES[row.status],
        str(row.n_steps),
        "" if row.total_tokens is None else str(row.total_tokens),
    )


def _plain_rows(rows: Iterable[TrajectoryRow]) -> Iterator[str]:
    """The listing as plain text, line by line: a header, then one line per run in aligned
    columns. The column widths are known only after the last row, so the cells wait in an
    unnamed temporary file rather than in memory."""
    widths = [len(name) for name in _COLUMNS]
    count, chunk = 0, []
    with tempfile.TemporaryFile() as waiting:
        for cells in map(_row_cells, rows):
            widths = [max(pair) for pair in zip(widths, map(len, cells), strict=True)]
            chunk.append(cells)
            if len(chunk) == SPILLED_ROWS:
                pickle.dump(chunk, waiting)
                count, chunk = count + len(chunk), []
        waiting.seek(0)
        yield _aligned(_COLUMNS, widths)
        for _ in range(count // SPILLED_ROWS):
            for cells in pickle.load(waiting):
                yield _aligned(cells, widths)
        for cells in chunk:
            yield _aligned(cells, widths)
    yield f"{count + len(chunk)} trajectories\n"


SPILLED_ROWS = 1000
"""Rows whose cells are written to the temporary file at a time."""


def _aligned(cells: Sequence[str], widths: list[int]) -> str:
    line = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
    return line.rstrip() + "\n"


def _row_json(row: TrajectoryRow) -> dict:
    return {
        "id": row.id,
        "source": row.harness,
        "model": row.model,
        "environment": row.environment,
        "task_id": row.task_id,
        "success": row.success,
        "status": row.status,
        "reward": row.reward,
        "run": row.run,
        "messages": row.n_messages,
        "steps": row.n_steps,
        "tokens": row.total_tokens,
        "parent": row.parent_id,
        "fork_index": row.fork_index,
    }


def _rows_table(rows: list[TrajectoryRow]) -> Table:
    table = Table(title=f"{len(rows)} trajectories")
    for column in _COLUMNS:
        table.add_column(column)
    styles = {"success": "[green]", "failure": "[red]", "model_error": "[yellow]", "unjudged": ""}
    for row in rows:
        cells = list(_row_cells(row))
        cells[5] = styles[row.status] + cells[5]
        table.add_row(*cells)
    return table


def show_command(
    traj_id: Annotated[str, typer.Argument(help="Trajectory id or unique prefix.")],
    db: DbOption = None,
    json_out: JsonOption = False,
    full: Annotated[bool, typer.Option("--full", help="Do not shorten long messages.")] = False,
    risk: Annotated[
        Path | None, typer.Option("--risk", help="Model file: also print failure risk per step.")
    ] = None,
) -> None:
    """Show one trajectory: messages, tool calls, labels, faults and outcome."""
    from trajforge.diagnose.storage import load_diagnoses  # `ls` does not need it
    from trajforge.store.metadata import metadata_history

    with open_store(db) as store:
        traj = store.get(traj_id)
        diagnoses = load_diagnoses(store, [traj.id])
        changes = metadata_history(store, traj.id)
    if json_out:
        print_json(traj.model_dump(mode="json"))
        return
    render_trajectory(console, traj, full=full)
    render_diagnoses(console, diagnoses)
    render_metadata_changes(console, changes)
    if risk is not None:
        from trajforge.cli.monitor import render_risk  # scikit-learn loads only when asked

        render_risk(traj, risk)

"""`trajforge stats`, `trajforge export` and `trajforge schema`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    ParquetOption,
    console,
    open_runs,
    open_store,
    print_json,
)
from trajforge.cli.options import Offer, RunFilter, option_sets
from trajforge.export import EXPORTERS, export
from trajforge.export.registry import WRITTEN, written_files
from trajforge.outputs import check_output_path
from trajforge.progress import heartbeat
from trajforge.schema import json_schema
from trajforge.store import default_db_path
from trajforge.store.stats import compute_stats


@option_sets
def stats_command(
    db: DbOption = None,
    runs: Annotated[RunFilter, Offer(without=("limit",))] = RunFilter(),
    json_out: JsonOption = False,
    parquet: ParquetOption = None,
) -> None:
    """Counts and success rates by source, model and environment; step and token spreads."""
    with open_runs(db, parquet) as source:
        report = compute_stats(source, runs.selection())
    if json_out:
        print_json(report)
        return
    print_stats(report)


def print_stats(report: dict[str, Any], out: Console = console) -> None:
    """Render a stats report as rich tables."""
    rate = report["success_rate"]
    errors = report["model_errors"]
    out.print(
        f"[bold]{report['total']}[/] trajectories, {report['successes']} successes"
        + (f" ({rate:.1%} of judged)" if rate is not None else "")
        + (f", {errors} ended by a model error (not judged)" if errors else "")
    )
    for key, title in (
        ("by_source", "source"),
        ("by_model", "model"),
        ("by_environment", "environment"),
    ):
        out.print(_group_table(report[key], title))
    out.print(_distribution_table(report))


def _group_table(groups: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=f"by {title}")
    for column in (title, "runs", "successes", "success rate", "model errors"):
        table.add_column(column, justify="left" if column == title else "right")
    for group in groups:
        rate = group["success_rate"]
        table.add_row(
            group["name"],
            str(group["total"]),
            str(group["successes"]),
            "-" if rate is None else f"{rate:.1%}",
            str(group["model_errors"]),
        )
    return table


def _distribution_table(report: dict[str, Any]) -> Table:
    table = Table(title="distributions per run")
    for column in ("", "runs", "min", "median", "p90", "max", "mean"):
        table.add_column(column, justify="right")
    rows = {
        "steps": report["steps"],
        "steps (success)": report["steps_by_outcome"]["success"],
        "steps (failure)": report["steps_by_outcome"]["failure"],
        "messages": report["messages"],
        "tokens": report["tokens"],
    }
    for name, dist in rows.items():
        if dist:
            cells = (_number(dist[k]) for k in ("count", "min", "median", "p90", "max", "mean"))
            table.add_row(name, *cells)
    return table


def _number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


@option_sets
def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write.")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help=f"One of: {', '.join(EXPORTERS.names())} (default: from the file name).",
        ),
    ] = None,
    db: DbOption = None,
    runs: RunFilter = RunFilter(),
    shard_rows: Annotated[
        int | None,
        typer.Option(
            "--shard-rows",
            min=1,
            help="Parquet: a folder of files of at most this many runs (read back by "
            "ls / stats --parquet DIR).",
        ),
    ] = None,
) -> None:
    """Export trajectories (JSONL round-trips exactly; Parquet for analytics; ATIF, one file
    per run in a folder, for tools that read Harbor trajectories) or training data (sft:
    training rows; openai: OpenAI fine-tuning chat lines; dpo: preference pairs; rl:
    token-level samples).

    Without --format, a `.parquet` file name means Parquet, anything else JSONL.
    """
    fmt = fmt or ("parquet" if shard_rows else format_for(out))
    EXPORTERS.get(fmt)  # fail on an unknown format before reading
    if not out.is_dir() and shard_rows is None:  # a folder: one file per run, or shards
        check_output_path(out, protected=[db or default_db_path()])
    with open_store(db) as store, heartbeat("export", f"writing {out} ({fmt})"):
        count = export(fmt, store, out, runs.selection(), shard_rows)
    files = f"{out}/" if shard_rows else ", ".join(str(p) for p in written_files(fmt, out))
    console.print(f"wrote {count} {WRITTEN.get(fmt, 'trajectories')} to {files} ({fmt})")


def format_for(out: Path) -> str:
    """The export format a file name implies: Parquet for `.parquet`, else JSONL."""
    return "parquet" if out.suffix.lower() == ".parquet" else "jsonl"


def schema_command(
    training: Annotated[
        bool, typer.Option("--training", help="The JSON Schema of each training-row form.")
    ] = False,
) -> None:
    """Print the JSON Schema of a trajectory document (or of the training rows)."""
    if training:
        from trajforge.generate.rows import json_schemas

        print_json(json_schemas())
        return
    print_json(json_schema())

"""`trajforge import`: files, folders and globs into the store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    console,
    err_console,
    open_store,
    print_json,
)
from trajforge.importers.pipeline import ImportReport, SourceOverrides, import_jobs, plan
from trajforge.importers.registry import DETECTION_ORDER
from trajforge.progress import ProgressLines


def import_command(
    paths: Annotated[list[str], typer.Argument(help="Files, folders or globs to import.")],
    db: DbOption = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=f"Force a format: {', '.join(DETECTION_ORDER)}, an installed plug-in's "
            "(trajforge formats), or an importer class as module:Class.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model of every imported run (for files that name none)."),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Set the run name of every imported run.")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=0,
            help="Processes that read and validate files while this one writes the store "
            "(default: one per core but one, for imports of 4 MB or more; 0: read here).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Import trajectories; each file is imported whole or not at all.

    Folders are searched recursively; files that are not runs are skipped and listed.
    """
    deciding = ProgressLines("import: finding formats", None, "file")
    jobs, report = plan(paths, fmt, deciding)
    deciding.finish()
    overrides = SourceOverrides(model=model, run=run)
    lines = ProgressLines("import", len(jobs), "file")
    lines.update(0)
    with open_store(db, must_exist=False) as store:
        import_jobs(store, jobs, report, lambda _: lines.advance(), overrides, workers)
    lines.finish()
    if json_out:
        print_json(_summary(report))
    else:
        print_import_report(report, overrides)
    if report.failed:
        raise typer.Exit(1)


def _summary(report: ImportReport) -> dict:
    return {
        "imported": report.added,
        "duplicates": report.duplicates,
        "files": len(report.files),
        "by_format": dict(Counter(f.format for f in report.files if not f.error)),
        "metadata_filled": report.filled,
        "metadata_kept": report.kept,
        "failed": [{"path": f.path, "error": f.error} for f in report.failed],
        "warnings": [
            {"path": f.path, "warning": w} for f in report.files if not f.error for w in f.warnings
        ],
        "not_trajectories": report.not_trajectories,
        "special_files": report.special_files,
        "sidecars": report.sidecars,
    }


def by_folder(paths: list[str]) -> list[tuple[str, int]]:
    """(folder, number of files) for a list of file paths, in first-seen order."""
    return list(Counter(str(Path(p).parent) for p in paths).items())


def _files_text(report: ImportReport) -> str:
    """'3 files (2 tau-bench, 1 failed)': read files by format, then the failed ones."""
    parts = [
        f"{n} {name}" for name, n in Counter(f.format for f in report.files if not f.error).items()
    ]
    if report.failed:
        parts.append(f"{len(report.failed)} failed")
    count = len(report.files)
    noun = "file" if count == 1 else "files"
    return f"{count} {noun} ({', '.join(parts)})" if parts else f"{count} {noun}"


def print_import_report(
    report: ImportReport, overrides: SourceOverrides | None = None, out: Console = console
) -> None:
    """The import summary: counts, skipped files grouped by folder, one line per failure."""
    out.print(
        f"imported [bold green]{report.added}[/] trajectories from {_files_text(report)}; "
        f"skipped [bold]{report.duplicates}[/] as duplicates; "
        f"{len(report.sidecars)} companion files consumed",
        soft_wrap=True,
    )
    if report.not_trajectories:
        count = len(report.not_trajectories)
        out.print(
            f"skipped {count} {'file' if count == 1 else 'files'} that are not trajectories "
            "(--json lists them):",
            soft_wrap=True,
        )
        for folder, count in by_folder(report.not_trajectories):
            out.print(f"  {folder}/ ({count})", markup=False, highlight=False, soft_wrap=True)
    if report.special_files:
        out.print(
            f"skipped {len(report.special_files)} special files (FIFOs, devices, sockets):",
            soft_wrap=True,
        )
        for path in report.special_files:
            out.print(f"  {path}", markup=False, highlight=False, soft_wrap=True)
    for result in report.files:
        for warning in [] if result.error else result.warnings:
            text = f"warning: {result.path}: {warning}"
            err_console.print(text, markup=False, highlight=False, soft_wrap=True)
    if overrides is not None:
        _print_metadata(report, overrides, out)
    for failed in report.failed:
        err_console.print(f"error: {failed.error}", markup=False, highlight=False, soft_wrap=True)


SHOWN_IDS = 3


def _names(fields: list[str]) -> str:
    return " and ".join("run name" if f == "run" else f for f in fields)


def _print_metadata(report: ImportReport, overrides: SourceOverrides, out: Console) -> None:
    """What --model / --run did to runs already stored: filled in, or kept theirs."""
    if report.filled:
        out.print(
            f"set {overrides.flags(only=report.filled_fields)} on {report.filled} runs already "
            f"stored with no {_names(report.filled_fields)} (logged; `trajforge show ID` "
            "lists the change)",
            soft_wrap=True,
        )
    kept = report.kept
    if not kept:
        return
    fields = _names(report.kept_fields)
    flags = overrides.flags(only=report.kept_fields)
    ids = " ".join(kept[:SHOWN_IDS]) + (" ..." if len(kept) > SHOWN_IDS else "")
    err_console.print(
        f"warning: {len(kept)} runs were already stored with another {fields}, which they "
        f"keep ({flags} not applied); to change them: trajforge set {flags} {ids} "
        "(--json lists every id under metadata_kept)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )

"""`trajforge import`: files, folders and globs into the store."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trajforge.cli.common import DbOption, JsonOption, console, err_console, open_store, print_json
from trajforge.importers.pipeline import ImportReport, import_jobs, plan


def import_command(
    paths: Annotated[list[str], typer.Argument(help="Files, folders or globs to import.")],
    db: DbOption = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="Force a format instead of detecting it.")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Import trajectories; each file is imported whole or not at all."""
    jobs, report = plan(paths, fmt)
    with open_store(db, must_exist=False) as store, _progress(json_out) as progress:
        task = progress.add_task("importing", total=len(jobs))
        import_jobs(store, jobs, report, on_file=lambda _: progress.advance(task))
    if json_out:
        print_json(_summary(report))
    else:
        _print_report(report)
    if report.failed:
        raise typer.Exit(1)


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=quiet,
        transient=True,
    )


def _summary(report: ImportReport) -> dict:
    return {
        "imported": report.added,
        "duplicates": report.duplicates,
        "files": len(report.files),
        "failed": [{"path": f.path, "error": f.error} for f in report.failed],
        "not_trajectories": report.not_trajectories,
        "sidecars": len(report.sidecars),
    }


def _print_report(report: ImportReport) -> None:
    console.print(
        f"imported [bold green]{report.added}[/] trajectories from {len(report.files)} files; "
        f"skipped [bold]{report.duplicates}[/] as duplicates; "
        f"{len(report.sidecars)} sidecar files consumed"
    )
    if report.not_trajectories:
        console.print(f"not trajectories ({len(report.not_trajectories)} files, skipped):")
        for path in report.not_trajectories:
            console.print(f"  {path}", markup=False, highlight=False)
    for failed in report.failed:
        err_console.print(f"error: {failed.error}", markup=False, highlight=False, soft_wrap=True)

"""`trajforge swe`: build, validate and judge real SWE-bench instances (no Docker)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import JsonOption, console, guarded, print_json
from trajforge.envs.swe_bench import validate as validation
from trajforge.envs.swe_bench.build import ensure_env
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.instances import Instance, get_instance, select_instances
from trajforge.envs.swe_bench.judge import judge_patch
from trajforge.envs.swe_bench.repos import mirror
from trajforge.errors import UserError
from trajforge.progress import ProgressLines, heartbeat

app = typer.Typer(help="Real SWE-bench instances: build environments, validate, judge patches.")

RepoOption = Annotated[
    list[str] | None, typer.Option("--repo", help="Repository (owner/name or name); repeat.")
]
InstanceOption = Annotated[
    list[str] | None, typer.Option("--instance", help="Instance id; repeat.")
]
DataOption = Annotated[
    Path | None,
    typer.Option("--data", envvar="TRAJFORGE_SWE_BENCH_DATA", help="SWE-bench data folder."),
]
CacheOption = Annotated[
    Path | None,
    typer.Option("--cache", envvar="TRAJFORGE_SWE_BENCH_CACHE", help="Build cache folder."),
]


@app.command("validate")
@guarded
def validate_command(
    repo: RepoOption = None,
    instance: InstanceOption = None,
    data: DataOption = None,
    cache: CacheOption = None,
    json_out: JsonOption = False,
) -> None:
    """Check that FAIL_TO_PASS tests fail at the base and all pass with the gold patch."""
    chosen = select_instances(repo, instance, data)
    progress = ProgressLines("swe validate", len(chosen), "instance")
    progress.update(0)

    def report(result: validation.Validation) -> None:
        verdict = "validated" if result.validated else "NOT validated"
        progress.show(progress.done + 1, last=f"{result.instance_id} {verdict}")

    results = validation.validate_all(chosen, cache_dir(cache), data, report)
    if json_out:
        print_json(
            {
                "by_repository": validation.by_repository(results),
                "instances": [r.model_dump() for r in results],
            }
        )
        return
    table = Table("repository", "instances", "validated", "not validated")
    for name, row in sorted(validation.by_repository(results).items()):
        table.add_row(
            name,
            str(row["instances"]),
            str(row["validated"]),
            str(row["instances"] - row["validated"]),
        )
    console.print(table)
    for result in results:
        if not result.validated:
            console.print(
                f"not validated: {result.instance_id}: {result.reason}",
                markup=False,
                soft_wrap=True,
            )


@app.command("build")
@guarded
def build_command(
    repo: RepoOption = None,
    instance: InstanceOption = None,
    data: DataOption = None,
    cache: CacheOption = None,
) -> None:
    """Build (or find in the cache) the environments of the chosen instances."""
    chosen: list[Instance] = select_instances(repo, instance, data)
    progress = ProgressLines("swe build", len(chosen), "environment")
    progress.update(0)
    for item in chosen:
        started = time.monotonic()
        built = ensure_env(item, cache_dir(cache), data)
        seconds = f"{time.monotonic() - started:.1f} s"
        progress.show(progress.done + 1, last=f"{item.instance_id} {built.folder} ({seconds})")


@app.command("judge")
@guarded
def judge_command(
    instance_id: Annotated[str, typer.Argument(help="Instance id.")],
    patch: Annotated[
        Path | None,
        typer.Option("--patch", help="Patch file (default: the gold patch; '-' reads stdin)."),
    ] = None,
    data: DataOption = None,
    cache: CacheOption = None,
    json_out: JsonOption = False,
) -> None:
    """Judge a patch as the SWE-bench harness does."""
    item = get_instance(instance_id, data)
    text = item.patch if patch is None else _read_patch(patch)
    folder = cache_dir(cache)
    with heartbeat("swe judge", f"building or finding the environment of {instance_id}") as now:
        built = ensure_env(item, folder, data)
        now(f"running the tests of {instance_id}")
        report = judge_patch(item, built, mirror(item, folder, data), text)
    if json_out:
        print_json(report.model_dump())
        return
    f2p, p2p = report.FAIL_TO_PASS, report.PASS_TO_PASS
    console.print(
        f"{item.instance_id}: {report.status} (FAIL_TO_PASS {len(f2p.success)} pass, "
        f"{len(f2p.failure)} fail; PASS_TO_PASS {len(p2p.success)} pass, {len(p2p.failure)} "
        f"fail; {report.seconds} s)",
        markup=False,
    )


def _read_patch(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    if not path.is_file():
        raise UserError(f"no patch file {path}")
    return path.read_text(errors="replace")

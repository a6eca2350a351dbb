"""`trajforge swe`: build, validate and judge real SWE-bench instances (no Docker)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import JsonOption, console, guarded, print_json
from trajforge.envs.swe_bench import validate as validation
from trajforge.envs.swe_bench.build import build_all
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.instances import Instance, get_instance, select_instances
from trajforge.envs.swe_bench.judge import JudgeJob, judge_all
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
BackendOption = Annotated[
    str, typer.Option("--backend", help="Where builds and tests run: local or ray.")
]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", min=1, help="Ray tasks at a time (ray backend).")
]


@app.command("validate")
@guarded
def validate_command(
    repo: RepoOption = None,
    instance: InstanceOption = None,
    data: DataOption = None,
    cache: CacheOption = None,
    backend: BackendOption = "local",
    concurrency: ConcurrencyOption = 1,
    json_out: JsonOption = False,
) -> None:
    """Check that FAIL_TO_PASS tests fail at the base and all pass with the gold patch."""
    chosen = select_instances(repo, instance, data)
    progress = ProgressLines("swe validate", len(chosen), "instance")
    progress.update(0)

    def report(result: validation.Validation) -> None:
        verdict = "validated" if result.validated else "NOT validated"
        progress.show(progress.done + 1, last=f"{result.instance_id} {verdict}")

    results = validation.validate_all(chosen, cache_dir(cache), data, report, backend, concurrency)
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
    backend: BackendOption = "local",
    concurrency: ConcurrencyOption = 1,
    json_out: JsonOption = False,
) -> None:
    """Build (or find in the cache) the environments of the chosen instances."""
    chosen: list[Instance] = select_instances(repo, instance, data)
    progress = ProgressLines("swe build", len(chosen), "environment")
    progress.update(0)
    results = []
    for built in build_all(chosen, cache_dir(cache), data, backend, concurrency):
        results.append(built)
        how = "built" if built.built_here else "found"
        progress.show(
            progress.done + 1, last=f"{built.instance_id} {how} {built.folder} ({built.seconds} s)"
        )
    if json_out:
        print_json([r.model_dump(mode="json") for r in results])


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
    backend: BackendOption = "local",
    json_out: JsonOption = False,
) -> None:
    """Judge a patch as the SWE-bench harness does."""
    item = get_instance(instance_id, data)
    job = JudgeJob(instance=item, patch=item.patch if patch is None else _read_patch(patch))
    what = f"building or finding the environment of {instance_id}, then running its tests"
    with heartbeat("swe judge", f"{what} ({backend})"):
        [(_, report)] = judge_all([job], cache_dir(cache), data, backend)
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

"""`trajforge swe`: build, validate and judge real SWE-bench instances (no Docker)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    config_from_options,
    console,
    guarded,
    print_json,
)
from trajforge.cli.options import ApiKeyOption
from trajforge.envs.swe_bench import validate as validation
from trajforge.envs.swe_bench.build import build_all
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.instances import Instance, get_instance, select_instances
from trajforge.envs.swe_bench.judge import JudgeJob, judge_all
from trajforge.errors import UserError
from trajforge.progress import ProgressLines, heartbeat
from trajforge.store import default_db_path

app = typer.Typer(
    help="Real SWE-bench instances: build environments, validate, judge patches, run an agent."
)

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


@app.command("agent")
@guarded
def agent_command(
    instance_id: Annotated[str, typer.Argument(help="Instance id.")],
    model_url: Annotated[
        str,
        typer.Option(
            "--model-url", help="OpenAI-compatible base URL (ends in /v1): trajforge serve, vLLM."
        ),
    ],
    model: Annotated[str, typer.Option("--model", help="Model name sent to it.")] = "trajforge",
    api_key: ApiKeyOption = None,
    mini: Annotated[
        str,
        typer.Option(
            "--mini",
            envvar="TRAJFORGE_MINI_SWE_AGENT",
            help="mini-swe-agent's mini-extra, or its venv folder (make mini-swe-agent).",
        ),
    ] = "mini-extra",
    steps: Annotated[int, typer.Option("--steps", help="mini-swe-agent's step limit.")] = 10,
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="Seconds the agent may run.")
    ] = 1800.0,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", help="mini-swe-agent config (default swebench.yaml); repeat."),
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Proxy session name (the run's).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Keep mini-swe-agent's own trajectory file.")
    ] = None,
    db: DbOption = None,
    data: DataOption = None,
    cache: CacheOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run mini-swe-agent, unchanged, on an instance: its commands in the sandbox at
    /testbed, its model calls recorded (token ids) through the proxy, the worktree judged."""
    from trajforge.envs.swe_bench.env import SweBenchConfig
    from trajforge.proxy.swe_agent import MiniSweAgentRun, run_mini_swe_agent

    run = config_from_options(
        MiniSweAgentRun,
        {"executable": "--mini", "model_name": "--model", "step_limit": "--steps",
         "time_limit_s": "--time-limit", "configs": "--config"},
        executable=mini, model_url=model_url, model_name=model, step_limit=steps,
        time_limit_s=time_limit, configs=config or ["swebench.yaml"], session=session,
        api_key=api_key,
        output=str(out) if out else None,
    )  # fmt: skip
    env_config = SweBenchConfig(
        data=str(data) if data else None, cache=str(cache) if cache else None
    )
    path = db or default_db_path()
    with heartbeat("swe agent", f"starting {instance_id}") as now:
        result = run_mini_swe_agent(instance_id, path, run, env_config, now)
    if json_out:
        print_json(result.model_dump())
        return
    console.print(
        f"{instance_id}: {result.status} (mini-swe-agent {result.exit_status} after "
        f"{result.model_calls} model calls, {result.agent_seconds} s; judged in "
        f"{result.judge_seconds} s); trajectory {result.trajectory_id} in {path}",
        markup=False,
        soft_wrap=True,
    )

"""Demo step: fault-injected batches with the noisy expert, and the robustness table."""

from __future__ import annotations

from typing import Any

from trajforge.cli.rollout import print_summary, robustness_table
from trajforge.envs import make_env
from trajforge.errors import UserError
from trajforge.evaluate.robustness import run_robustness
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.episode import Limits
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.rollout.tasks import select_tasks

BATCHES = (("household", "8", "transient:0.2,silent:0.1"), ("tau-retail", "4", "transient:0.2"))
CONDITIONS = ("transient:0.2", "persistent", "silent:0.2")


def _config(env: str, tasks: str, faults: list[str], n: int = 1) -> RolloutConfig:
    return RolloutConfig(
        env=env,
        tasks=select_tasks(make_env(env), tasks),
        policy="noisy-expert",
        n=n,
        faults=faults,
        limits=Limits(max_steps=40),
        run="demo",
    )


def demo_step(ctx: Any) -> None:
    """Run small faulty batches (household, tau when present); print the robustness table."""
    for env, tasks, faults in BATCHES:
        try:
            config = _config(env, tasks, [faults])
        except UserError as exc:
            ctx.console.print(f"{env}: skipped ({exc})")
            continue
        summary, _ = run_batch(config, ctx.store, run_local, concurrency=2)
        ctx.console.print(f"[bold]{env}[/] · noisy-expert · faults {faults}")
        print_summary(summary, ctx.console)
        ctx.results[f"rollout:{env}"] = summary
    base = _config("household", "6", [], n=2)
    reports = run_robustness(base, CONDITIONS, lambda c: run_batch(c, ctx.store, run_local)[1])
    ctx.console.print(robustness_table(reports))
    ctx.results["robustness"] = reports

"""The demo step of the tau environments: replay, fork a failed run, hand off."""

from __future__ import annotations

from typing import Any

from trajforge.agents import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.cli.envs import print_matrix, print_replay
from trajforge.envs.base import ServesTasks
from trajforge.envs.registry import ENVIRONMENTS
from trajforge.envs.replay import replay_many, replayable
from trajforge.rollout.factory import AgentSpec, PolicyOptions
from trajforge.rollout.fork import fork
from trajforge.rollout.handoff import HandoffConfig, run_matrix

HANDOFF_TASKS = 20


def _self_contained(run: Any) -> bool:
    """A replayable run of an environment that holds its own data (not one that builds
    environments from outside data, as swe-bench does: the demo stays offline and quick)."""
    if not replayable(run):
        return False
    env_class = ENVIRONMENTS.get(run.task.environment)
    return not (isinstance(env_class, type) and issubclass(env_class, ServesTasks))


def demo_step(ctx: Any) -> None:
    """Replay every stored run of a self-contained replayable environment (the bundled tau
    runs and any rollouts of earlier steps), fork a failed tau run at its midpoint, print a
    handoff table."""
    runs = [t for t in ctx.store.query() if _self_contained(t) and t.parent is None]
    summary = replay_many(runs)
    print_replay(summary, ctx.console)
    ctx.results["tau_replay"] = summary
    tau_failures = (t for t in runs if t.success is False and t.source.harness == "tau-bench")
    failed = next(tau_failures, None)
    if failed is not None:
        at = len(failed.messages) // 2
        child = fork(failed, at, ExpertPolicy(), user=ScriptedUser())
        ctx.store.add(child)
        ctx.console.print(
            f"forked failed run {failed.id[:12]} ({failed.task.environment}, task "
            f"{failed.task.id}) at message {at} of {len(failed.messages)} with the expert: "
            f"child {child.id[:12]}, success={child.success}",
            markup=False,
        )
        ctx.results["tau_fork"] = child.id
    specs = {
        "expert": AgentSpec(policy="expert"),
        "noisy-expert": AgentSpec(policy="noisy-expert", options=PolicyOptions(error_rate=0.3)),
    }
    matrix = run_matrix(
        "tau-retail", list(specs), ["expert"], specs, HandoffConfig(k=1), HANDOFF_TASKS
    )
    print_matrix(matrix, ctx.console)
    ctx.results["tau_handoff"] = matrix

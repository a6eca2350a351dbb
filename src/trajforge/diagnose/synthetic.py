"""Synthetic failures with known decisive errors: the noisy expert in a tau environment.

The noisy expert follows the oracle but, with probability `error_rate`, takes a plausible
wrong action and labels it (source `oracle`). Runs that fail carry their ground truth, which
`trajforge.diagnose.eval` scores the localizers against.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from trajforge.agents.expert import NoisyExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.counterfactual import EXTRA_STEPS
from trajforge.envs import ENVIRONMENTS
from trajforge.envs.tau.tasks import TauTaskSet
from trajforge.rollout.episode import Limits, run_episode, start_trajectory
from trajforge.schema import Source, Trajectory


class SyntheticConfig(BaseModel):
    """Which synthetic failures to make."""

    environment: str = Field(default="tau-retail", description="tau-retail or tau-airline.")
    failures: int = Field(default=20, description="Failed runs wanted.")
    error_rate: float = Field(default=0.2, description="Noisy-expert mistake rate.")
    seed: int = Field(default=0, description="Seed of the mistakes (task t uses seed + t).")
    max_attempts: int = Field(default=400, description="Give up after this many runs.")


def noisy_run(environment: str, task_index: int, error_rate: float, seed: int) -> Trajectory:
    """One noisy-expert episode on the bundled task at `task_index`."""
    tasks = TauTaskSet(environment).tasks()
    task = tasks[task_index % len(tasks)]
    env = ENVIRONMENTS.get(environment)()
    source = Source(harness="trajforge", model="noisy-expert", run=f"synthetic-seed-{seed}")
    traj = start_trajectory(env, task, source)
    env.bind_conversation(traj.messages)
    policy = NoisyExpertPolicy(error_rate=error_rate, seed=seed)
    traj = run_episode(
        env,
        policy,
        task,
        user=ScriptedUser(),
        trajectory=traj,
        limits=Limits(max_steps=EXTRA_STEPS),
    )
    return traj.with_id()


def synthetic_failures(config: SyntheticConfig | None = None) -> list[Trajectory]:
    """Noisy-expert runs that failed, each with its deliberate errors labelled."""
    config = config or SyntheticConfig()
    failures: list[Trajectory] = []
    for attempt in range(config.max_attempts):
        traj = noisy_run(config.environment, attempt, config.error_rate, config.seed + attempt)
        if traj.outcome.success is False and traj.labels:
            failures.append(traj)
            if len(failures) >= config.failures:
                break
    return failures

"""Synthetic failures with known decisive errors: the noisy expert in a forkable environment.

The noisy expert follows the oracle but, with probability `error_rate`, takes a plausible
wrong action and labels it (source `oracle`). Runs that fail carry their deliberate
mistakes as labels. `counterfactual_labels` then replaces them by the one decisive error
the counterfactual oracle finds (the first step after which the expert can no longer
succeed), so the label is the decisive step exactly, not merely a mistake.

Environments: `tau-retail`, `tau-airline` (the bundled tasks), `tau2-retail`,
`tau2-airline` (tau2's tasks; all four with the scripted user), and
`household` (generated tasks; the step limit is the oracle's shortest plan plus
`step_slack`, so a run fails when its detours use up the slack).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from trajforge.agents.expert import NoisyExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.counterfactual import EXTRA_STEPS, CounterfactualLocalizer
from trajforge.diagnose.datasets import SYNTHETIC_MODEL
from trajforge.envs import make_env
from trajforge.envs.base import Oracle, TaskSet
from trajforge.envs.tau.env import TauEnv
from trajforge.envs.tau.tasks import TauTaskSet
from trajforge.errors import UserError
from trajforge.rollout.episode import Limits, run_episode, start_trajectory
from trajforge.schema import Label, Source, Task, Trajectory
from trajforge.store import Store


class SyntheticConfig(BaseModel):
    """Which synthetic failures to make."""

    environment: str = Field(
        default="tau-retail", description="tau-retail, tau-airline, household."
    )
    failures: int = Field(default=20, description="Failed runs wanted.")
    error_rate: float = Field(default=0.2, description="Noisy-expert mistake rate.")
    seed: int = Field(default=0, description="Seed of the mistakes (task t uses seed + t).")
    max_attempts: int = Field(default=400, description="Give up after this many runs.")
    step_slack: int = Field(
        default=3, description="household: steps allowed beyond the shortest plan."
    )


def _tasks(environment: str, count: int, seed: int) -> list[Task]:
    if environment.startswith("tau-"):
        return TauTaskSet(environment).tasks()
    env = make_env(environment)
    if not isinstance(env, TaskSet):
        raise UserError(f"environment '{environment}' cannot generate tasks for synthetic runs")
    return env.tasks(count, seed=seed)


def noisy_run(
    environment: str, task: Task | int, error_rate: float, seed: int, step_slack: int = 3
) -> Trajectory:
    """One noisy-expert episode on `task` (or the bundled tau task at that index)."""
    if isinstance(task, int):
        tasks = TauTaskSet(environment).tasks()
        task = tasks[task % len(tasks)]
    env = make_env(environment)
    source = Source(harness="trajforge", model=SYNTHETIC_MODEL, run=f"synthetic-seed-{seed}")
    traj = start_trajectory(env, task, source)
    if isinstance(env, TauEnv):
        env.bind_conversation(traj.messages)
        limits = Limits(max_steps=EXTRA_STEPS)
    else:
        shortest = env.distance() if isinstance(env, Oracle) else None
        limits = Limits(max_steps=(shortest or 0) + step_slack)
    policy = NoisyExpertPolicy(error_rate=error_rate, seed=seed)
    traj = run_episode(env, policy, task, user=ScriptedUser(), trajectory=traj, limits=limits)
    return traj.with_id()


def synthetic_failures(config: SyntheticConfig | None = None) -> list[Trajectory]:
    """Noisy-expert runs that failed, each with its deliberate errors labelled."""
    config = config or SyntheticConfig()
    tasks = _tasks(config.environment, config.max_attempts, config.seed)
    failures: list[Trajectory] = []
    for attempt in range(config.max_attempts):
        task = tasks[attempt % len(tasks)]
        traj = noisy_run(
            config.environment, task, config.error_rate, config.seed + attempt, config.step_slack
        )
        if traj.outcome.success is False and traj.labels:
            failures.append(traj)
            if len(failures) >= config.failures:
                break
    return failures


def counterfactual_labels(runs: list[Trajectory]) -> list[Trajectory]:
    """The runs relabelled with their counterfactual decisive step (source `oracle`); the
    deliberate mistakes move to `metadata["deliberate_errors"]`. Runs the expert cannot solve
    from the start, or whose error the oracle does not place, are dropped."""
    localizer = CounterfactualLocalizer()
    out = []
    for traj in runs:
        found = localizer.localize(traj)
        if found is None or found.step is None:
            continue
        copy = traj.model_copy(deep=True)
        copy.metadata["deliberate_errors"] = [lb.message_index for lb in traj.labels]
        copy.labels = [
            Label(
                message_index=found.step,
                agent="assistant",
                category=found.category,
                reason="counterfactual decisive error" + (" (omission)" if found.omission else ""),
                source="oracle",
            )
        ]
        out.append(copy)
    return out


def synthesize_into_store(store: Store, config: SyntheticConfig) -> tuple[int, int]:
    """Make counterfactual-labelled failures and add them; (made, added as new)."""
    runs = counterfactual_labels(synthetic_failures(config))
    if not runs:
        raise UserError(
            f"no failures with a decisive step in {config.max_attempts} noisy-expert runs on "
            f"{config.environment}; raise --error-rate or --max-attempts"
        )
    added, _ = store.add_many(runs)
    return len(runs), added

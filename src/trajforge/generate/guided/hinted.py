"""Hinted demonstrations: runs whose actions use a privileged hint that sits in the system
prompt, for training a teacher that reads guidance.

A privileged policy (the household oracle, say) acts on the hidden state; written down with
the environment's hidden-state hint in its system prompt (the same block `GuidedPolicy`
shows a teacher under guidance), the run becomes a demonstration in which what the hint
says is what the actions do. A model trained on such runs, mixed with runs of an
observable teacher without a hint, learns to act on the hint when there is one and to
search when there is none: a teacher that can be guided.
"""

from __future__ import annotations

from collections.abc import Callable

from trajforge.agents.base import Policy
from trajforge.envs.base import Environment
from trajforge.generate.guided.guidance import Guidance, hidden_state_guidance
from trajforge.generate.guided.teacher import GuidedPolicy, with_guidance
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Task, Trajectory


def task_hint(env: Environment, task: Task) -> Guidance | None:
    """The hidden-state hint of `task`'s start state (None: the environment has none)."""
    env.reset(task)
    return hidden_state_guidance(env)


def hinted_run(
    env_factory: Callable[[], Environment], policy: Policy, task: Task, max_steps: int
) -> Trajectory | None:
    """`policy`'s run on `task`, the policy seeing the task's hint in its system prompt, and
    recorded with it there (the hint also in `metadata["hint"]`); None when the task has no
    hint or the run fails."""
    hint = task_hint(env_factory(), task)
    if hint is None:
        return None
    guided = GuidedPolicy(policy, hint)
    run = run_episode(env_factory(), guided, task, limits=Limits(max_steps=max_steps))
    if not run.outcome.success:
        return None
    metadata = run.metadata | {"hint": hint.model_dump()}
    return run.model_copy(
        update={"messages": with_guidance(run.messages, hint), "metadata": metadata}
    )

"""Strategies as conditioning text for a trained student.

A student reads strategies only if its training rows carried them. `conditioned_rows` puts
each run's task's strategies at the end of its system prompt (`agents.llm.with_strategies`,
the block an llm policy sees), and `conditioned_starts` gives an evaluation episode the same
block, or none: one student is evaluated with and without the strategies it was trained
with. The `tiny` codec keeps that block of a system prompt (`serve.codec.system_guidance`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trajforge.agents.llm import with_strategies
from trajforge.envs.base import Environment
from trajforge.generate.recovery import household_rows
from trajforge.schema import Task, Trajectory
from trajforge.train.evaluate import Start, fresh_starts

Strategies = Mapping[str, Sequence[str]]
"""Task id -> the texts of its retrieved strategies (`PolicyOptions.strategies`)."""


def conditioned(traj: Trajectory, texts: Sequence[str]) -> Trajectory:
    """A copy of the run whose system prompt ends with `texts` (unchanged without any)."""
    return traj.model_copy(update={"messages": with_strategies(traj.messages, list(texts))})


def conditioned_rows(
    runs: Sequence[Trajectory], strategies: Strategies, kind: str = "demo"
) -> list[dict[str, Any]]:
    """The household training rows of the successful runs, each with its task's strategies
    in the system prompt (an empty mapping: the plain rows)."""
    return [
        row
        for run in runs
        if run.outcome.success
        for row in household_rows(conditioned(run, strategies.get(run.task.id, ())), kind=kind)
    ]


def conditioned_starts(
    env_factory: Callable[[], Environment], tasks: Sequence[Task], strategies: Strategies
) -> list[Start]:
    """Fresh episodes of `tasks`, each with its task's strategies in the system prompt."""
    starts = fresh_starts(env_factory, tasks)
    for _, traj in starts:
        traj.messages = conditioned(traj, strategies.get(traj.task.id, ())).messages
    return starts

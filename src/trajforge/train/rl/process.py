"""Process rewards from forks: step values of a rollout, turned into per-step advantages.

V(t), the value of the state before agent step t, is estimated by forking the rollout there
(the environment rebuilt by replaying its tool calls) and letting the observable household
teacher continue: `GAMMA ** k` when it succeeds after k more steps, 0 when it fails within
`extra_steps`. The teacher is deterministic, so one fork per step is the estimate (a sampled
continuation policy would need n forks per step). After the last step, V is 1 for a solved
episode and a fork of the final state otherwise.

The advantage of step t is V(t+1) - V(t): positive for an action that brought the teacher's
finish nearer, negative for one that pushed it away or made the task unreachable. It is
scaled by the spread of all steps' values in the iteration and added, times
`process_weight`, to the group-normalised outcome advantage of the step's tokens.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.rollout.episode import Limits
from trajforge.rollout.fork import ForkOptions, fork
from trajforge.schema import Trajectory

GAMMA = 0.9


def teacher_value(run: Trajectory, at: int, extra_steps: int) -> float:
    """GAMMA ** (teacher steps to success) from the state after the first `at` messages."""
    before = sum(1 for m in run.messages[:at] if m.role == "assistant")
    options = ForkOptions(limits=Limits(max_steps=before + extra_steps), harness="trajforge-rl")
    child = fork(run, at, ObservableTeacher(), options=options)
    if not child.outcome.success:
        return 0.0
    return GAMMA ** (len(child.assistant_indices()) - before)


def step_values(run: Trajectory, extra_steps: int = 20) -> list[float]:
    """V before each agent step, then V after the last one (len = steps + 1)."""
    values = [teacher_value(run, index, extra_steps) for index in run.assistant_indices()]
    if run.outcome.success:
        values.append(1.0)
    else:
        values.append(teacher_value(run, len(run.messages), extra_steps))
    return values


def step_advantages(runs: Sequence[Trajectory], extra_steps: int = 20) -> list[list[float]]:
    """V(t+1) - V(t) per step of each run, divided by the spread of all of them."""
    deltas = []
    for run in runs:
        values = step_values(run, extra_steps)
        deltas.append([after - before for before, after in itertools.pairwise(values)])
    flat = [d for run in deltas for d in run]
    spread = math.sqrt(sum(d * d for d in flat) / len(flat)) if flat else 0.0
    if spread < 1e-8:
        return [[0.0] * len(run) for run in deltas]
    return [[d / spread for d in run] for run in deltas]

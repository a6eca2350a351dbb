"""Risk of the prefixes of one trajectory under a trained detector.

- `risk_curve(traj, model)`: the risk after every step, in one batch.
- `current_risk(traj, model)`: the risk after the last completed step, from scratch.
- `IncrementalRisk(model).update(traj)`: the same value as `current_risk` for a run that grows
  between calls (one object per session): it extracts and featurizes only the steps that are
  new since the last call and scores only the newest feature row. When the run is not an
  extension of the one it saw (history rewritten or truncated, another run) it starts over.
"""

from __future__ import annotations

import numpy as np

from trajforge.monitor.detectors import Detector
from trajforge.monitor.features import (
    TEXT_DIMS,
    PrefixState,
    hashed_words,
    normalized_profile,
    prefix_features,
)
from trajforge.monitor.steps import (
    Step,
    extract_steps,
    message_key,
    recorded_calls,
    recorded_usage,
    require_steps,
    shows_bash,
    steps_from,
)
from trajforge.schema import LLMCall, Trajectory


def risk_curve(traj: Trajectory, model: Detector) -> list[tuple[int, float]]:
    """[(message index of step k's assistant message, risk after step k)] for every step.

    The risk after step k uses the prefix up to and including step k's observations. A run
    without agent steps is a `UserError`.
    """
    steps = require_steps(traj)
    risks = model.risk(prefix_features(traj, steps))
    return [(step.index, float(risk)) for step, risk in zip(steps, risks, strict=True)]


def completed_steps(traj: Trajectory) -> list[Step]:
    """The steps whose observations are in: a final assistant message with nothing after it
    (its tool calls not yet run) is left out."""
    steps = extract_steps(traj)
    if steps and steps[-1].end == steps[-1].index + 1:
        steps = steps[:-1]
    return steps


def current_risk(traj: Trajectory, model: Detector) -> tuple[int, float | None]:
    """(completed steps, risk after the last completed step or None when there is none)."""
    steps = completed_steps(traj)
    if not steps:
        return 0, None
    return len(steps), float(model.risk(prefix_features(traj, steps))[-1])


class IncrementalRisk:
    """`current_risk` of a run that grows between calls, at the cost of its new steps only.

    It keeps the `PrefixState` and summed word counts of the completed steps it consumed, the
    `message_key` of every message they span, the usage each step took from its call, and the
    action format. A call is an extension when all of that is unchanged and the message just
    past the consumed steps is absent or an assistant message (so no consumed step gained an
    observation); then only the steps from there on are extracted. Otherwise it starts over
    (`rebuilds` counts those). Checking the consumed messages is a comparison per message;
    extracting and featurizing a step costs far more.

    A step whose observations end the run so far is consumed as it is; if more observations
    for it arrive before the next assistant message, the next call starts over.
    """

    def __init__(self, model: Detector) -> None:
        self.model = model
        self.rebuilds = 0
        """Times a run that was not an extension of the consumed one made it start over."""
        self.reset()

    def reset(self) -> None:
        """Forget the consumed run."""
        self.steps = 0
        """Completed steps consumed."""
        self.risk: float | None = None
        """Risk after the last consumed step (None before the first)."""
        self._state: PrefixState | None = None
        self._words = np.zeros(TEXT_DIMS)
        self._instruction: str | None = None
        self._format = ""
        self._bash = False
        self._keys: list[tuple] = []
        self._usage: list[tuple[int, tuple[int, int] | None]] = []

    def update(self, traj: Trajectory) -> tuple[int, float | None]:
        """(completed steps, risk after the last one): equal to `current_risk(traj, model)`."""
        calls = recorded_calls(traj)
        if self.steps and not self._extends(traj, calls):
            self.rebuilds += 1
            self.reset()
        fmt = self._run_format(traj)
        new = steps_from(traj, len(self._keys), fmt, calls, completed_only=True)
        if new:
            self._consume(traj, new, fmt, calls)
        return self.steps, self.risk

    def _run_format(self, traj: Trajectory) -> str:
        """`action_format(traj)`, given that the consumed messages are unchanged."""
        tail = traj.messages[len(self._keys) :]
        return "bash" if self._bash or any(shows_bash(m) for m in tail) else "tools"

    def _extends(self, traj: Trajectory, calls: dict[int, LLMCall]) -> bool:
        messages, end = traj.messages, len(self._keys)
        return (
            traj.task.instruction == self._instruction
            and len(messages) >= end
            and (len(messages) == end or messages[end].role == "assistant")
            and all(message_key(m) == k for m, k in zip(messages[:end], self._keys, strict=True))
            and all(recorded_usage(calls.get(i)) == usage for i, usage in self._usage)
            and self._run_format(traj) == self._format
        )

    def _consume(
        self, traj: Trajectory, steps: list[Step], fmt: str, calls: dict[int, LLMCall]
    ) -> None:
        if self._state is None:
            self._state = PrefixState(traj.task.instruction)
            self._instruction = traj.task.instruction
            self._format = fmt
        state = self._state
        for step in steps:
            state.update(step)
        self._words = self._words + hashed_words(steps).sum(axis=0)
        spanned = traj.messages[len(self._keys) : steps[-1].end]
        self._keys.extend(message_key(m) for m in spanned)
        self._bash = self._bash or any(shows_bash(m) for m in spanned)
        self._usage.extend((s.index, recorded_usage(calls.get(s.index))) for s in steps)
        self.steps += len(steps)
        self.risk = float(self.model.risk(self._row(state)[None, :])[0])

    def _row(self, state: PrefixState) -> np.ndarray:
        """The feature row after the last consumed step, as `prefix_features` builds it."""
        counts = np.asarray(list(state.vector().values()), dtype=np.float64)
        return np.concatenate([counts, normalized_profile(self._words[None, :])[0]])

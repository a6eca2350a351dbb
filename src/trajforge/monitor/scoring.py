"""Risk of the prefixes of one trajectory under a trained detector."""

from __future__ import annotations

from trajforge.monitor.detectors import Detector
from trajforge.monitor.features import prefix_features
from trajforge.monitor.steps import Step, extract_steps, require_steps
from trajforge.schema import Trajectory


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

"""Featurized runs: the unit the detectors train on and the evaluation splits by.

A `RunFeatures` holds one run's prefix feature matrix (row k-1 = after step k), the tokens of
each step's model call, and the label (the run failed). Splits are always by `group`, the
task id, so no prefix of a task is ever on both sides of a split.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from trajforge.monitor.features import prefix_features
from trajforge.monitor.steps import extract_steps, step_tokens
from trajforge.schema import Trajectory


@dataclass
class RunFeatures:
    """One run, featurized at every prefix."""

    traj_id: str
    group: str
    """Split key: the task id (with its environment), shared by every run of the task."""
    failed: bool
    features: np.ndarray
    """(steps, features): row k-1 describes the prefix after step k."""
    tokens: np.ndarray
    """Prompt plus completion tokens of each step's model call."""
    message_index: np.ndarray
    """Message index of each step's assistant message."""
    estimated_tokens: bool = False
    """No usage was recorded; tokens are estimated from text length."""

    @property
    def steps(self) -> int:
        return len(self.tokens)

    def tokens_after(self, step: int) -> int:
        """Tokens of the calls after step `step` (1-based): what stopping there saves."""
        return int(self.tokens[step:].sum())


def featurize_run(traj: Trajectory) -> RunFeatures:
    """Featurize one labeled run (its outcome must be known)."""
    steps = extract_steps(traj)
    return RunFeatures(
        traj_id=traj.id,
        group=f"{traj.task.environment}:{traj.task.id}",
        failed=not traj.outcome.success,
        features=prefix_features(traj, steps),
        tokens=np.asarray([step_tokens(s) for s in steps], dtype=float),
        message_index=np.asarray([s.index for s in steps], dtype=int),
        estimated_tokens=any(s.estimated_tokens for s in steps),
    )


def featurize_runs(trajs: Iterable[Trajectory], min_steps: int = 2) -> list[RunFeatures]:
    """Featurize the runs with a known outcome and at least `min_steps` steps (a run a model
    error ended has none: it is not judged, so it is neither a positive nor a negative)."""
    runs = []
    for traj in trajs:
        if traj.outcome.success is None or len(traj.assistant_indices()) < min_steps:
            continue
        runs.append(featurize_run(traj))
    return runs


def training_rows(runs: list[RunFeatures]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, groups) over every prefix a monitor decides on: steps 1 .. n-1 of each run.

    The last step is left out: after it the run is over and there is nothing left to stop.
    """
    xs = [r.features[: r.steps - 1] for r in runs if r.steps > 1]
    ys = [np.full(r.steps - 1, r.failed) for r in runs if r.steps > 1]
    gs = [np.full(r.steps - 1, r.group, dtype=object) for r in runs if r.steps > 1]
    return np.vstack(xs), np.concatenate(ys).astype(int), np.concatenate(gs)

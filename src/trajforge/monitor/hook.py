"""Online use of a trained detector: a stop hook for the rollout runner and a per-session check
for the recording proxy.

- `StopHook(model, threshold)` is a `rollout.episode.StepHook`: `run_episode(..., hooks=[hook])`
  calls it after every agent step; when the risk of the run so far reaches the threshold it
  raises `EpisodeEnd("monitor")`, so the episode ends cleanly with termination reason
  `monitor` (the step that was just proposed is not executed).
- `SessionMonitor(model).should_stop(traj) -> bool` is the same decision without raising, for
  the proxy: call it with the session's trajectory so far before forwarding the next request;
  on True, end the session and record termination reason `monitor`.

Both decide on completed steps only (an assistant message whose tool calls have not run yet is
not scored), never before the detector's `min_step`, and by default with the threshold the
detector chose on its training runs for 1% of successful runs stopped.

A monitor remembers the run it last saw (`scoring.IncrementalRisk`): when the next call's run
extends it, only the new steps are featurized and only the newest row is scored, so a whole
run costs O(steps) instead of O(steps²); a rewritten history or another run starts over, with
the same result as scoring from scratch. Use one monitor per session; calls on one monitor are
serialized by its own lock, and monitors share no state.
"""

from __future__ import annotations

import threading
from pathlib import Path

from trajforge.errors import EpisodeEnd, UserError
from trajforge.monitor.detectors import Detector
from trajforge.monitor.modelfile import load_detector
from trajforge.monitor.scoring import IncrementalRisk
from trajforge.schema import TerminationReason, Trajectory

MONITOR_REASON: TerminationReason = "monitor"


class SessionMonitor:
    """Decides whether a run so far should be stopped."""

    def __init__(
        self,
        model: Detector | str | Path,
        threshold: float | None = None,
        min_step: int | None = None,
    ) -> None:
        self.model = load_detector(model) if isinstance(model, str | Path) else model
        self.threshold = _threshold(self.model) if threshold is None else threshold
        self.min_step = self.model.config.min_step if min_step is None else min_step
        self.last_risk: float | None = None
        self.scorer = IncrementalRisk(self.model)
        self._lock = threading.Lock()

    @property
    def steps_seen(self) -> int:
        """Completed steps of the session's run scored so far."""
        return self.scorer.steps

    def reset(self) -> None:
        """Forget the run seen so far (the next call scores its run from scratch)."""
        with self._lock:
            self.scorer.reset()
            self.last_risk = None

    def should_stop(self, traj: Trajectory) -> bool:
        """True when the risk after the last completed step reaches the threshold."""
        with self._lock:
            steps, risk = self.scorer.update(traj)
            self.last_risk = risk
        return risk is not None and steps >= self.min_step and risk >= self.threshold


class StopHook(SessionMonitor):
    """A rollout step hook that ends the episode with reason `monitor`."""

    def __call__(self, traj: Trajectory) -> None:
        if self.should_stop(traj):
            traj.metadata["monitor"] = {"risk": self.last_risk, "threshold": self.threshold}
            raise EpisodeEnd(
                MONITOR_REASON, f"failure risk {self.last_risk:.3f} >= {self.threshold:.3f}"
            )


def should_stop(traj: Trajectory, model: Detector, threshold: float | None = None) -> bool:
    """One-off form of `SessionMonitor(model, threshold).should_stop(traj)`."""
    return SessionMonitor(model, threshold).should_stop(traj)


def _threshold(model: Detector) -> float:
    key = str(model.config.default_loss)
    if key not in model.thresholds:
        raise UserError(f"detector has no threshold for loss {key}; pass a threshold")
    return model.thresholds[key]

"""The monitor's failure risk for the UI: a model file when given, else the rule detector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel

from trajforge.errors import UserError
from trajforge.monitor import RuleDetector, load_detector, risk_curve
from trajforge.monitor.detectors import Detector
from trajforge.monitor.stoprule import stop_step
from trajforge.schema import Trajectory


class RiskCurve(BaseModel):
    """Risk after each agent step of a run and where the stop rule fires."""

    detector: str
    message_indices: list[int]
    risks: list[float]
    threshold: float | None
    stop_step: int | None
    """1-based step where the rule stops the run, None when it never does."""

    @property
    def stop_message(self) -> int | None:
        return None if self.stop_step is None else self.message_indices[self.stop_step - 1]


class RiskScorer:
    """Scores runs with one detector; caches the latest risk of runs seen on the runs page."""

    def __init__(self, model_file: Path | None) -> None:
        self.detector: Detector = load_detector(model_file) if model_file else RuleDetector()
        self.from_file = model_file is not None
        self._latest: dict[tuple[str, int], float | None] = {}

    def curve(self, traj: Trajectory) -> RiskCurve | None:
        """The run's curve, or None when it has no agent steps."""
        try:
            points = risk_curve(traj, self.detector)
        except UserError:
            return None
        risks = np.asarray([risk for _, risk in points])
        threshold = self.detector.thresholds.get(str(self.detector.config.default_loss))
        stop = (
            None
            if threshold is None
            else stop_step(risks, threshold, self.detector.config.min_step)
        )
        return RiskCurve(
            detector=self.detector.name,
            message_indices=[index for index, _ in points],
            risks=[float(r) for r in risks],
            threshold=threshold,
            stop_step=stop,
        )

    def latest(self, traj: Trajectory) -> float | None:
        """Risk after the last step (cached by id and length)."""
        key = (traj.id, len(traj.messages))
        if key not in self._latest:
            curve = self.curve(traj)
            self._latest[key] = curve.risks[-1] if curve and curve.risks else None
        return self._latest[key]

"""Online early stop for RL rollouts: the failure monitor, trained on the policy's own runs.

After `early_stop_after` iterations, the learned failure detector (`monitor.detectors`) is
fitted on every rollout recorded so far (the proxy's sessions, labelled by their posted
outcomes; task-grouped inner folds) and saved beside the checkpoints as `monitor.model`.
From the next iteration on the proxy runs with it (`ProxyConfig.monitor`): a session whose
failure risk reaches the threshold for `early_stop_loss` of successful runs stopped gets
HTTP 403, the harness ends the episode there, and the episode counts as a failure. The
detector is fitted once; the rows report how many episodes it stopped and the episode-steps
the iteration took, so compute saved can be weighed against reward per episode-step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajforge.errors import UserError
from trajforge.monitor.dataset import featurize_runs
from trajforge.monitor.detectors import LearnedConfig, LearnedDetector
from trajforge.monitor.modelfile import save_detector
from trajforge.schema import Trajectory
from trajforge.store import Store

MONITOR_FILE = "monitor.model"


def train_monitor(db: Path, out: Path, seed: int = 0) -> dict[str, Any]:
    """Fit the detector on the recorded sessions of `db`; write it to `out`."""
    with Store(db) as store:
        runs = [t for t in store.query() if t.outcome.success is not None]
    features = featurize_runs(runs)
    failed = sum(r.failed for r in features)
    if failed == 0 or failed == len(features):
        raise UserError(
            f"cannot train the early-stop monitor: the {len(features)} rollouts so far are all "
            f"{'failures' if failed else 'successes'}"
        )
    detector = LearnedDetector(LearnedConfig(min_step=3, min_step_candidates=(3, 5, 8), seed=seed))
    detector.fit(features)
    info = {"runs": len(features), "failed": failed, "min_step": detector.config.min_step}
    save_detector(detector, out, {**info, "kind": detector.kind})
    return {**info, "kind": detector.kind}


def stopped(recorded: Trajectory | None) -> bool:
    """The proxy's record of a session says its monitor stopped it."""
    return recorded is not None and recorded.outcome.termination_reason == "monitor"

"""Early failure detection: prefix features, detectors, stop rules and offline evaluation.

Public API:
- `prefix_features(traj)`, `FEATURE_VERSION`, `feature_names()`: features of every prefix.
- `RuleDetector`, `LengthDetector`, `LearnedDetector`, `DETECTORS`: failure risk per prefix.
- `cross_validate`, `evaluate_detector`: task-grouped offline evaluation.
- `headroom(runs)`: the ceiling (perfect stop savings, hindsight AUROC) the figures sit under.
- `save_detector`, `load_detector`: model files (checked feature version).
- `risk_curve(traj, model)`: [(message index, risk)] for `show`.
- `StopHook`, `SessionMonitor`, `should_stop`: online stopping (rollouts, proxy).
"""

from trajforge.monitor.dataset import RunFeatures, featurize_run, featurize_runs
from trajforge.monitor.detectors import (
    DETECTORS,
    DetectorConfig,
    LearnedConfig,
    LearnedDetector,
    LengthDetector,
    RuleDetector,
)
from trajforge.monitor.evaluate import (
    Evaluation,
    cross_validate,
    evaluate_detector,
    evaluate_saved,
)
from trajforge.monitor.features import FEATURE_VERSION, feature_names, prefix_features
from trajforge.monitor.headroom import headroom
from trajforge.monitor.hook import SessionMonitor, StopHook, should_stop
from trajforge.monitor.modelfile import load_detector, read_header, save_detector
from trajforge.monitor.scoring import risk_curve

__all__ = [
    "DETECTORS",
    "FEATURE_VERSION",
    "DetectorConfig",
    "Evaluation",
    "LearnedConfig",
    "LearnedDetector",
    "LengthDetector",
    "RuleDetector",
    "RunFeatures",
    "SessionMonitor",
    "StopHook",
    "cross_validate",
    "evaluate_detector",
    "evaluate_saved",
    "feature_names",
    "featurize_run",
    "featurize_runs",
    "headroom",
    "load_detector",
    "prefix_features",
    "read_header",
    "risk_curve",
    "save_detector",
    "should_stop",
]

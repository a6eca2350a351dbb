"""Detectors: score every prefix of a run with a failure risk in [0, 1].

- `rule`: a fixed count of loop and error signals (error streaks, repeated actions, nothing new
  touched for a while, re-editing one file, reverts, retry talk); no learning.
- `length`: logistic regression on the run's length so far (steps, tokens). Length is
  confounded with task difficulty; the learned detector must beat it, not reuse it.
- `learned`: scikit-learn gradient boosting or logistic regression on all prefix features. The
  estimator (gbm, or logistic at two regularization strengths) is chosen by task-grouped
  cross-validation on the training runs, by mean AUROC among prefixes of equal length (10,
  20, 30, 40 steps), and its scores are calibrated (Platt scaling) on the out-of-fold scores
  of that same inner CV.

Every detector also carries stop thresholds (`thresholds`, by target loss) chosen on its
training runs; the learned one chooses them on out-of-fold risks so that they hold on new runs,
and on the same risks chooses its earliest stop step (`min_step`) among a few candidates.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, Field
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from trajforge.monitor.dataset import RunFeatures, training_rows
from trajforge.monitor.features import feature_names
from trajforge.monitor.stoprule import DEFAULT_LOSSES, stop_step, thresholds_for_losses
from trajforge.registry import Registry


class DetectorConfig(BaseModel):
    """Settings shared by the detectors."""

    min_step: int = Field(default=5, description="The stop rule never fires before this step.")
    losses: tuple[float, ...] = Field(
        default=DEFAULT_LOSSES, description="Target shares of successful runs stopped."
    )
    default_loss: float = Field(
        default=0.01, description="The loss whose threshold the online stop hook uses."
    )


class LearnedConfig(DetectorConfig):
    """Settings of the learned detector."""

    candidates: tuple[str, ...] = Field(
        default=("gbm", "logistic", "logistic-strong"),
        description="Estimators to choose from by inner CV (gbm, logistic, logistic-strong).",
    )
    inner_folds: int = Field(default=4, description="Task-grouped folds of the inner CV.")
    min_step_candidates: tuple[int, ...] = Field(
        default=(5, 10, 15),
        description="Earliest stop steps to choose from (those below `min_step` are ignored): "
        "the one whose thresholds save the most failed-run tokens on the out-of-fold risks.",
    )
    seed: int = Field(default=0, description="Seed of the estimators and the inner split.")


class Detector(Protocol):
    name: str
    thresholds: dict[str, float]

    @property
    def config(self) -> DetectorConfig: ...

    def fit(self, runs: list[RunFeatures]) -> None: ...

    def risk(self, features: np.ndarray) -> np.ndarray:
        """Failure risk of each prefix row of a (steps, features) matrix."""
        ...


def column(name: str) -> int:
    return feature_names().index(name)


class RuleDetector:
    """Share of fixed loop/error rules that hold (see module docstring)."""

    name = "rule"
    RULES: tuple[tuple[str, float], ...] = (
        ("error_streak", 3),
        ("repeats_last5", 2),
        ("steps_since_new_path", 10),
        ("max_edits_one_file", 8),
        ("reverts", 2),
        ("retries_last5", 2),
        ("format_errors", 2),
        ("steps", 60),
    )

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self.thresholds: dict[str, float] = {}

    def fit(self, runs: list[RunFeatures]) -> None:
        self.thresholds = _thresholds(self, runs, [self.risk(r.features) for r in runs])

    def risk(self, features: np.ndarray) -> np.ndarray:
        hits = [features[:, column(name)] >= limit for name, limit in self.RULES]
        return np.mean(hits, axis=0)


class LengthDetector:
    """Logistic regression on steps and log tokens so far."""

    name = "length"
    COLUMNS = ("steps", "log_tokens")

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self.thresholds: dict[str, float] = {}
        self.model: Any = None

    def fit(self, runs: list[RunFeatures]) -> None:
        x, y, _ = training_rows(runs)
        self.model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        self.model.fit(self._select(x), y)
        self.thresholds = _thresholds(self, runs, [self.risk(r.features) for r in runs])

    def risk(self, features: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(self._select(features))[:, 1]

    def _select(self, features: np.ndarray) -> np.ndarray:
        return features[:, [column(name) for name in self.COLUMNS]]


LOGISTIC_C = {"logistic": 0.1, "logistic-strong": 0.01}
"""Logistic regression variants by inverse regularization strength."""


def make_estimator(kind: str, seed: int) -> Any:
    """An unfitted estimator: `gbm`, `logistic` or `logistic-strong`."""
    if kind == "gbm":
        return HistGradientBoostingClassifier(
            max_iter=100,
            learning_rate=0.05,
            max_leaf_nodes=15,
            min_samples_leaf=40,
            l2_regularization=1.0,
            random_state=seed,
        )
    if kind.startswith("logistic"):
        strength = LOGISTIC_C.get(kind)
        if strength is None:
            raise ValueError(f"unknown estimator family '{kind}' ({', '.join(LOGISTIC_C)})")
        return make_pipeline(StandardScaler(), LogisticRegression(C=strength, max_iter=2000))
    raise ValueError(f"unknown estimator family '{kind}' (gbm, logistic)")


class LearnedDetector:
    """A calibrated classifier on all prefix features (see module docstring)."""

    name = "learned"

    def __init__(self, config: LearnedConfig | None = None) -> None:
        self.config = config or LearnedConfig()
        self.thresholds: dict[str, float] = {}
        self.kind: str | None = None
        self.model: Any = None
        self.calibrator: Any = None
        self.inner_auroc: dict[str, float] = {}

    def fit(self, runs: list[RunFeatures]) -> None:
        with threadpool_limits(limits=1):  # small data: threads cost more than they save
            self._fit(runs)

    def _fit(self, runs: list[RunFeatures]) -> None:
        x, y, groups = training_rows(runs)
        splits = list(group_folds(groups, self.config.inner_folds, self.config.seed))
        scores = {kind: self._out_of_fold(kind, x, y, splits) for kind in self.config.candidates}
        step_of_row = x[:, column("steps")]
        self.inner_auroc = {
            kind: within_step_auroc(y, s, step_of_row) for kind, s in scores.items()
        }
        self.kind = max(self.inner_auroc, key=self.inner_auroc.__getitem__)
        self.calibrator = LogisticRegression().fit(_logit(scores[self.kind])[:, None], y)
        self.model = make_estimator(self.kind, self.config.seed).fit(x, y)
        calibrated = self.calibrator.predict_proba(_logit(scores[self.kind])[:, None])[:, 1]
        risks = _split_by_run(runs, calibrated)
        self.config = self.config.model_copy(update={"min_step": self._best_min_step(runs, risks)})
        self.thresholds = _thresholds(self, runs, risks)

    def _best_min_step(self, runs: list[RunFeatures], risks: list[np.ndarray]) -> int:
        """The candidate earliest stop step whose thresholds save the most tokens of failed
        runs (mean over the target losses) on out-of-fold risks; ties go to the earliest."""
        failed = [r.failed for r in runs]
        options = [m for m in self.config.min_step_candidates if m >= self.config.min_step]
        best, best_saved = self.config.min_step, -1.0
        for min_step in sorted(options):
            limits = thresholds_for_losses(risks, failed, min_step, self.config.losses)
            shares = [_saved_share(runs, risks, t, min_step) for t in limits.values()]
            saved = float(np.mean(shares))
            if saved > best_saved + 1e-12:
                best, best_saved = min_step, saved
        return best

    def _out_of_fold(self, kind: str, x: np.ndarray, y: np.ndarray, splits: list) -> np.ndarray:
        scores = np.zeros(len(y))
        for train, test in splits:
            model = make_estimator(kind, self.config.seed).fit(x[train], y[train])
            scores[test] = model.predict_proba(x[test])[:, 1]
        return scores

    def risk(self, features: np.ndarray) -> np.ndarray:
        raw = self.model.predict_proba(features)[:, 1]
        return self.calibrator.predict_proba(_logit(raw)[:, None])[:, 1]


SELECTION_STEPS = (10, 20, 30, 40)


def within_step_auroc(y: np.ndarray, scores: np.ndarray, steps: np.ndarray) -> float:
    """Mean AUROC among prefixes of equal length (steps 10, 20, 30, 40): how well a score
    ranks runs that are equally far along, which is what the monitor is judged on."""
    values = []
    for step in SELECTION_STEPS:
        mask = steps == step
        if len(set(y[mask])) == 2:
            values.append(roc_auc_score(y[mask], scores[mask]))
    return float(np.mean(values)) if values else float(roc_auc_score(y, scores))


def _logit(p: np.ndarray) -> np.ndarray:
    clipped = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(clipped / (1 - clipped))


def group_folds(groups: np.ndarray, folds: int, seed: int):
    """Task-grouped folds with the tasks shuffled by `seed`."""
    unique = np.unique(groups)
    order = np.random.default_rng(seed).permutation(len(unique))
    fold_of = {unique[i]: position % folds for position, i in enumerate(order)}
    labels = np.asarray([fold_of[g] for g in groups])
    yield from GroupKFold(n_splits=folds).split(labels, groups=labels)


def _split_by_run(runs: list[RunFeatures], row_values: np.ndarray) -> list[np.ndarray]:
    """Row values of `training_rows(runs)` back into one array per run (padded to its length).

    The last step of each run has no training row; it gets the previous value (the stop rule
    never decides on it anyway).
    """
    out, start = [], 0
    for run in runs:
        if run.steps <= 1:
            out.append(np.zeros(run.steps))
            continue
        values = row_values[start : start + run.steps - 1]
        out.append(np.append(values, values[-1]))
        start += run.steps - 1
    return out


def _saved_share(
    runs: list[RunFeatures], risks: list[np.ndarray], threshold: float, min_step: int
) -> float:
    """Share of the failed runs' tokens that stopping at `threshold` saves."""
    saved = total = 0.0
    for run, risk in zip(runs, risks, strict=True):
        if not run.failed:
            continue
        total += run.tokens.sum()
        step = stop_step(risk, threshold, min_step)
        saved += run.tokens_after(step) if step is not None else 0.0
    return saved / total if total else 0.0


def _thresholds(detector: Detector, runs: list[RunFeatures], risks: list[np.ndarray]):
    failed = [r.failed for r in runs]
    config = detector.config
    return thresholds_for_losses(risks, failed, config.min_step, config.losses)


DETECTORS: Registry[type] = Registry("detector")
DETECTORS.register("rule", "trajforge.monitor.detectors:RuleDetector")
DETECTORS.register("length", "trajforge.monitor.detectors:LengthDetector")
DETECTORS.register("learned", "trajforge.monitor.detectors:LearnedDetector")

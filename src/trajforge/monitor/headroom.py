"""How much a monitor could do on a set of runs at best: the ceiling its figures sit under.

- `perfect_savings`: the share of failed-run tokens saved by a detector that knows every
  outcome and stops each failed run at step m (and no successful run). No detector can save
  more with that earliest stop step.
- `hindsight_auroc`: task-grouped cross-validated AUROC of the learned detector's estimator
  trained and scored on each run's *last* feature row: the whole run seen in hindsight. When
  even this is low, the features do not separate the outcomes at all, and no prefix of a run
  will do better.
- `final_length_auroc`: AUROC of each run's final step count (how much the outcome shows in
  length alone).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from trajforge.monitor.dataset import RunFeatures
from trajforge.monitor.detectors import group_folds, make_estimator

PERFECT_STOP_STEPS = (5, 10, 20)
HINDSIGHT_ESTIMATOR = "logistic-strong"


def perfect_savings(runs: list[RunFeatures], step: int) -> float | None:
    """Share of failed-run tokens saved when every failed run is stopped after `step`."""
    failed = [r for r in runs if r.failed]
    total = sum(float(r.tokens.sum()) for r in failed)
    if not total:
        return None
    saved = sum(r.tokens_after(step) for r in failed if r.steps > step)
    return round(saved / total, 4)


def hindsight_auroc(runs: list[RunFeatures], folds: int = 5, seed: int = 0) -> float | None:
    """Task-grouped CV AUROC of a detector that sees each run's last feature row."""
    labels = np.asarray([r.failed for r in runs], dtype=int)
    if len(set(labels)) < 2:
        return None
    rows = np.vstack([r.features[-1] for r in runs])
    groups = np.asarray([r.group for r in runs], dtype=object)
    scores = np.zeros(len(runs))
    with threadpool_limits(1):
        for train, test in group_folds(groups, folds, seed):
            if len(set(labels[train])) < 2:
                return None
            estimator = make_estimator(HINDSIGHT_ESTIMATOR, seed).fit(rows[train], labels[train])
            scores[test] = estimator.predict_proba(rows[test])[:, 1]
    return round(float(roc_auc_score(labels, scores)), 4)


def headroom(runs: list[RunFeatures], folds: int = 5, seed: int = 0) -> dict:
    """The ceiling figures of `runs` (see module docstring)."""
    labels = [r.failed for r in runs]
    lengths = [r.steps for r in runs]
    return {
        "perfect_tokens_saved_at_step": {
            str(step): perfect_savings(runs, step) for step in PERFECT_STOP_STEPS
        },
        "hindsight_auroc": hindsight_auroc(runs, folds, seed),
        "final_length_auroc": (
            round(float(roc_auc_score(labels, lengths)), 4) if len(set(labels)) == 2 else None
        ),
    }

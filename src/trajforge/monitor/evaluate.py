"""Offline evaluation: split by task, never by prefix of the same run.

`cross_validate` fits a fresh detector on the training folds (tasks) and scores the held-out
tasks; each held-out run is stopped with the thresholds of the detector trained without it.
`evaluate_detector` scores runs with an already trained detector and its own thresholds.
Both return an `Evaluation`, whose `summary()` is the JSON that `monitor eval --json` prints.

Measures (failure is the positive class):
- AUROC / AUPRC at absolute steps, over runs still going at that step (more than k steps),
  and at prefix fractions of each run's own length.
- tokens saved at a loss L: with the threshold set on training runs for at most L of the
  successful runs stopped, the share of all tokens spent on failed runs that the stop rule
  saves (the tokens of the calls after the stop step); and the share of successful runs it
  actually stops. A lead time is the number of steps (and tokens) between alert and run end.
- the trade-off curve of tokens saved against successful runs stopped over all thresholds.
- 95% bootstrap intervals over tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from trajforge.errors import UserError
from trajforge.monitor.dataset import RunFeatures
from trajforge.monitor.detectors import Detector, group_folds
from trajforge.monitor.stoprule import stop_step

STEPS = (10, 20, 30, 40)
FRACTIONS = (0.25, 0.5, 0.75)
REPORTED_LOSSES = ("0.01", "0.05")


@dataclass
class Scored:
    """One evaluated run: its risk per step and the thresholds that apply to it."""

    run: RunFeatures
    risks: np.ndarray
    thresholds: dict[str, float]
    min_step: int
    fold: int = 0


@dataclass
class Evaluation:
    """Risks of held-out runs, and the measures computed from them."""

    detector: str
    scored: list[Scored]
    details: dict = field(default_factory=dict)

    def summary(self, bootstrap: int = 200, seed: int = 0) -> dict:
        result = measures(self.scored)
        result["detector"] = self.detector
        result["ci95"] = bootstrap_intervals(self.scored, bootstrap, seed) if bootstrap else {}
        result["curve"] = tradeoff_curve(self.scored)
        return result | self.details


def cross_validate(
    runs: list[RunFeatures], make: Callable[[], Detector], folds: int = 5, seed: int = 0
) -> Evaluation:
    """Task-grouped `folds`-fold cross-validation of the detector `make()` builds."""
    groups = np.asarray([r.group for r in runs], dtype=object)
    if len(set(groups)) < folds:
        raise UserError(f"cross-validation needs at least {folds} tasks, got {len(set(groups))}")
    scored: list[Scored] = []
    name, chosen = "", []
    for fold, (train, test) in enumerate(group_folds(groups, folds, seed)):
        detector = make()
        detector.fit([runs[i] for i in train])
        name = detector.name
        chosen.append(getattr(detector, "kind", None) or detector.name)
        scored.extend(_score(detector, [runs[i] for i in test], fold))
    details = {"folds": folds, "seed": seed, "fold_estimators": chosen}
    return Evaluation(detector=name, scored=scored, details=details)


def evaluate_detector(detector: Detector, runs: list[RunFeatures]) -> Evaluation:
    """Score `runs` with a trained detector and its own thresholds."""
    return Evaluation(detector=detector.name, scored=_score(detector, runs, 0))


def _score(detector: Detector, runs: list[RunFeatures], fold: int) -> list[Scored]:
    return [
        Scored(r, detector.risk(r.features), detector.thresholds, detector.config.min_step, fold)
        for r in runs
    ]


def measures(scored: list[Scored]) -> dict:
    """The evaluation figures of a set of scored runs (see module docstring)."""
    return {
        "runs": len(scored),
        "failed": sum(s.run.failed for s in scored),
        "tokens_estimated": any(s.run.estimated_tokens for s in scored),
        "auroc_at_step": {str(k): _at_step(scored, k, roc_auc_score) for k in STEPS},
        "auprc_at_step": {str(k): _at_step(scored, k, average_precision_score) for k in STEPS},
        "runs_at_step": {str(k): sum(s.run.steps > k for s in scored) for k in STEPS},
        "auroc_at_fraction": {str(f): _at_fraction(scored, f, roc_auc_score) for f in FRACTIONS},
        "auprc_at_fraction": {
            str(f): _at_fraction(scored, f, average_precision_score) for f in FRACTIONS
        },
    } | stop_measures(scored)


def _at_step(scored: list[Scored], step: int, metric: Callable) -> float | None:
    going = [s for s in scored if s.run.steps > step]
    return _metric([s.run.failed for s in going], [s.risks[step - 1] for s in going], metric)


def _at_fraction(scored: list[Scored], fraction: float, metric: Callable) -> float | None:
    labels = [s.run.failed for s in scored]
    values = [s.risks[max(0, int(np.ceil(fraction * s.run.steps)) - 1)] for s in scored]
    return _metric(labels, values, metric)


def _metric(labels: list[bool], values: list[float], metric: Callable) -> float | None:
    if len(set(labels)) < 2:
        return None
    return round(float(metric(np.asarray(labels, dtype=int), np.asarray(values))), 4)


def stop_measures(scored: list[Scored]) -> dict:
    """Tokens saved, successful and failed runs stopped, and lead times, per reported loss."""
    saved, lost, caught, lead = {}, {}, {}, {}
    for loss in REPORTED_LOSSES:
        outcome = [_stop(s, s.thresholds.get(loss, np.inf)) for s in scored]
        failed_tokens = sum(s.run.tokens.sum() for s in scored if s.run.failed)
        saved_tokens = sum(o[1] for s, o in zip(scored, outcome, strict=True) if s.run.failed)
        saved[loss] = _share(saved_tokens, failed_tokens)
        lost[loss] = _share(sum(o[0] for s, o in _pairs(scored, outcome, False)), _n(scored, False))
        caught[loss] = _share(sum(o[0] for s, o in _pairs(scored, outcome, True)), _n(scored, True))
        lead[loss] = _lead_times(scored, outcome)
    return {
        "tokens_saved_at_loss": saved,
        "successful_stopped_at_loss": lost,
        "failed_stopped_at_loss": caught,
        "lead_time_at_loss": lead,
    }


def _stop(s: Scored, threshold: float) -> tuple[bool, float, int]:
    """(stopped, tokens saved, steps left) of one run under a threshold."""
    step = stop_step(s.risks, threshold, s.min_step)
    if step is None:
        return False, 0.0, 0
    return True, float(s.run.tokens_after(step)), s.run.steps - step


def _pairs(scored: list[Scored], outcome: list, failed: bool):
    return [(s, o) for s, o in zip(scored, outcome, strict=True) if s.run.failed == failed]


def _n(scored: list[Scored], failed: bool) -> int:
    return sum(s.run.failed == failed for s in scored)


def _share(part: float, whole: float) -> float | None:
    return round(float(part) / float(whole), 4) if whole else None


def _lead_times(scored: list[Scored], outcome: list) -> dict:
    steps = [o[2] for s, o in _pairs(scored, outcome, True) if o[0]]
    if not steps:
        return {"stopped_failed_runs": 0}
    return {
        "stopped_failed_runs": len(steps),
        "median_steps_before_end": float(np.median(steps)),
        "mean_steps_before_end": round(float(np.mean(steps)), 2),
    }


def tradeoff_curve(scored: list[Scored], points: int = 21) -> list[dict]:
    """Tokens saved vs successful runs stopped, sweeping one threshold over all runs."""
    decided = np.concatenate([s.risks[s.min_step - 1 : s.run.steps - 1] for s in scored])
    if decided.size == 0:
        return []
    curve = []
    for threshold in np.unique(np.quantile(decided, np.linspace(0.5, 1.0, points))):
        outcome = [_stop(s, float(threshold)) for s in scored]
        failed_tokens = sum(s.run.tokens.sum() for s in scored if s.run.failed)
        saved = sum(o[1] for s, o in _pairs(scored, outcome, True))
        lost = sum(o[0] for s, o in _pairs(scored, outcome, False))
        curve.append(
            {
                "threshold": round(float(threshold), 4),
                "successful_stopped": _share(lost, _n(scored, False)),
                "tokens_saved": _share(saved, failed_tokens),
            }
        )
    return curve


def bootstrap_intervals(scored: list[Scored], rounds: int, seed: int) -> dict:
    """95% intervals of the headline figures, resampling tasks with replacement."""
    by_group: dict[str, list[Scored]] = {}
    for s in scored:
        by_group.setdefault(s.run.group, []).append(s)
    groups = list(by_group)
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        pick = rng.integers(0, len(groups), len(groups))
        sample = [s for i in pick for s in by_group[groups[i]]]
        for key, value in _headline(sample).items():
            if value is not None:
                samples.setdefault(key, []).append(value)
    return {key: _interval(values) for key, values in samples.items()}


def _headline(scored: list[Scored]) -> dict[str, float | None]:
    figures = {f"auroc_at_step.{k}": _at_step(scored, k, roc_auc_score) for k in STEPS}
    figures |= {f"auprc_at_step.{k}": _at_step(scored, k, average_precision_score) for k in STEPS}
    stops = stop_measures(scored)
    for loss in REPORTED_LOSSES:
        figures[f"tokens_saved_at_loss.{loss}"] = stops["tokens_saved_at_loss"][loss]
        figures[f"successful_stopped_at_loss.{loss}"] = stops["successful_stopped_at_loss"][loss]
    return figures


def _interval(values: list[float]) -> list[float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return [round(float(low), 4), round(float(high), 4)]


def evaluate_saved(
    detector: Detector,
    runs: list[RunFeatures],
    trained_groups: list[str] | None,
    bootstrap: int = 200,
    seed: int = 0,
) -> dict:
    """Score a saved detector, keeping the runs of the tasks it was trained on apart.

    The headline figures are on runs of unseen tasks (`sample: out-of-sample`); runs of its
    training tasks are scored separately under `in_sample`. When every run is a training
    run, the headline itself is labelled `in-sample`. A model file that does not record its
    training tasks gives `sample: unknown`.
    """
    if trained_groups is None:
        summary = evaluate_detector(detector, runs).summary(bootstrap, seed)
        return summary | {"sample": "unknown: the model file does not record its training tasks"}
    seen_groups = set(trained_groups)
    unseen = [r for r in runs if r.group not in seen_groups]
    seen = [r for r in runs if r.group in seen_groups]
    if not unseen:
        summary = evaluate_detector(detector, seen).summary(bootstrap, seed)
        return summary | {"sample": "in-sample: every run is of a task the model was trained on"}
    summary = evaluate_detector(detector, unseen).summary(bootstrap, seed)
    summary["sample"] = "out-of-sample: runs of tasks the model was not trained on"
    if seen:
        figures = _headline(evaluate_detector(detector, seen).scored)
        summary["in_sample"] = {"runs": len(seen), "sample": "in-sample"} | figures
    return summary

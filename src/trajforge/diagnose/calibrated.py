"""The calibrated diagnoser: a localizer's answer with a confidence learned on tuning data,
and the calibrated prior where that confidence is too low.

Fitting (on labelled tuning runs only):
- the prior (`trajforge.diagnose.prior`) is fitted per log format;
- the base localizer runs on every tuning run; each answer falls in a cell (log format, the
  detector or category that produced it) and the cell's exact-hit rate on the tuning runs is
  the confidence of later answers from it. Cells with fewer than `MIN_RUNS` tuning runs use
  the detector's rate over all formats, then the base method's rate on the format. A log
  format with fewer than `MIN_RUNS` tuning runs gets confidence 0: its answers cannot be
  calibrated, so the diagnoser abstains there;
- the threshold of each format is the prior's own exact-hit rate there: below it the base
  answer is expected to do worse than the prior, so the diagnoser abstains and answers with
  the prior (`abstained: true`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from trajforge.diagnose.datasets import log_format
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.localize import Localizer
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.prior import ALL_FORMATS, NOT_FITTED, FormatPrior, PriorLocalizer
from trajforge.diagnose.trained import RankerModel, RankerTrainer, TrainedLocalizer, load_ranker
from trajforge.errors import UserError
from trajforge.schema import Trajectory

MIN_RUNS = 3
INNER_FOLDS = 3
ANY = "*"


CONFIDENCE_BINS = (0.2, 0.4, 0.6, 0.8)


def answer_kind(diagnosis: Diagnosis | None) -> str:
    """The cell an answer is calibrated in: its detector (else its category), and the bin of
    its own confidence when the method gives one."""
    if diagnosis is None or diagnosis.step is None:
        return "none"
    kind = str(diagnosis.details.get("detector") or diagnosis.category or "any")
    if diagnosis.confidence is None:
        return kind
    level = sum(diagnosis.confidence >= edge for edge in CONFIDENCE_BINS)
    return f"{kind}@{level}"


class CalibratedLocalizer:
    """See module docstring. `base` is the localizer whose answers are calibrated."""

    name = "calibrated"

    def __init__(
        self,
        base: Localizer | None = None,
        prior: PriorLocalizer | None = None,
        rates: dict[tuple[str, str], tuple[int, int]] | None = None,
    ) -> None:
        if base is None:
            from trajforge.diagnose.localize import HeuristicLocalizer

            base = HeuristicLocalizer()
        self.base = base
        self.prior = prior or PriorLocalizer()
        self.rates = rates or {}
        self.tuned_on = frozenset(getattr(base, "tuned_on", frozenset()))
        self.tuned_tasks = frozenset(getattr(base, "tuned_tasks", frozenset()))
        if isinstance(base, RankerTrainer):
            # its tuned parts are refitted with ours: nothing hand-tuned to declare
            self.tuned_on, self.tuned_tasks = frozenset(), frozenset()
        if isinstance(base, RankerTrainer | TrainedLocalizer):
            self.name = "calibrated-trained"

    def fit(self, runs: list[Trajectory]) -> CalibratedLocalizer:
        labelled = [t for t in runs if reference_label(t) is not None]
        answers, base = self._tuning_answers(labelled)
        counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for traj in labelled:
            found = answers.get(traj.id)
            label = reference_label(traj)
            hit = int(found is not None and label is not None and found.step == label.message_index)
            kind = answer_kind(found)
            for cell in ((log_format(traj), kind), (log_format(traj), ANY), (ANY, kind)):
                counts[cell][0] += hit
                counts[cell][1] += 1
        rates = {cell: (h, n) for cell, (h, n) in counts.items()}
        return CalibratedLocalizer(base, self.prior.fit(labelled), rates)

    def _tuning_answers(self, labelled: list[Trajectory]) -> tuple[dict, Localizer]:
        """The base's answers on the tuning runs, and the base to use afterwards. A fittable
        base answers each tuning run from a fit on the other task folds (its answers on its
        own training runs would overstate it), then is fitted on all tuning runs."""
        from trajforge.diagnose.holdout import Fittable, task_key

        if not isinstance(self.base, Fittable):
            return {t.id: self.base.localize(t) for t in labelled}, self.base
        tasks = sorted({task_key(t) for t in labelled})
        answers: dict[str, Diagnosis | None] = {}
        for fold in range(INNER_FOLDS):
            held = set(tasks[fold::INNER_FOLDS])
            rest = [t for t in labelled if task_key(t) not in held]
            if not held or not rest:
                continue
            inner = self.base.fit(rest)
            answers |= {t.id: inner.localize(t) for t in labelled if task_key(t) in held}
        return answers, self.base.fit(labelled)

    def confidence(self, traj: Trajectory, found: Diagnosis | None) -> float:
        """The tuning exact-hit rate of answers like `found`; 0 for a log format with fewer
        than MIN_RUNS tuning runs (nothing to calibrate on: the diagnoser abstains)."""
        fmt, kind = log_format(traj), answer_kind(found)
        if self.rates.get((fmt, ANY), (0, 0))[1] < MIN_RUNS:
            return 0.0
        for cell in ((fmt, kind), (ANY, kind), (fmt, ANY)):
            hits, n = self.rates.get(cell, (0, 0))
            if n >= MIN_RUNS:
                return hits / n
        return 0.0

    def threshold(self, traj: Trajectory) -> float:
        prior = self.prior.priors.get(log_format(traj)) or self.prior.priors.get(ALL_FORMATS)
        return prior.accuracy if prior else 0.0

    def check(self, traj: Trajectory) -> None:
        if not self.rates:
            raise UserError(NOT_FITTED.format(method=self.name))
        self.base.check(traj)

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        found = self.base.localize(traj)
        confidence = self.confidence(traj, found)
        threshold = self.threshold(traj)
        if found is not None and found.step is not None and confidence >= threshold:
            found.confidence = round(confidence, 4)
            found.details |= {"calibrated": True, "threshold": round(threshold, 4)}
            return found
        fallback = self.prior.localize(traj)
        if fallback is None:
            return found
        fallback.method = "calibrated"
        fallback.abstained = True
        fallback.details |= {
            "abstained_from": getattr(self.base, "name", "base"),
            "base_step": found.step if found else None,
            "base_confidence": round(confidence, 4),
            "threshold": round(threshold, 4),
        }
        return fallback


def calibrated_trained() -> CalibratedLocalizer:
    """The calibrated diagnoser over the trained step ranker (`--method calibrated-trained`)."""
    return CalibratedLocalizer(base=RankerTrainer())


def with_calibration(fitted: CalibratedLocalizer) -> RankerModel:
    """The model file of a fitted calibrated-trained diagnoser: its ranker plus calibration."""
    if not isinstance(fitted.base, TrainedLocalizer):
        raise UserError("only a calibrated diagnoser over the trained ranker can be saved")
    priors = {name: prior.to_json() for name, prior in fitted.prior.priors.items()}
    rates = [[fmt, kind, hits, n] for (fmt, kind), (hits, n) in fitted.rates.items()]
    return fitted.base.model.model_copy(update={"calibration": {"priors": priors, "rates": rates}})


def load_diagnoser(path: str | Path) -> Localizer:
    """The diagnoser in a model file: the ranker, under its calibration when it has one."""
    model = load_ranker(path)
    base = TrainedLocalizer(model)
    if model.calibration is None:
        return base
    try:
        priors = {k: FormatPrior.from_json(v) for k, v in model.calibration["priors"].items()}
        rates = {(f, k): (h, n) for f, k, h, n in model.calibration["rates"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: calibration is damaged ({exc!r}); retrain it") from None
    return SavedDiagnoser(CalibratedLocalizer(base, PriorLocalizer(priors), rates))


class SavedDiagnoser:
    """A diagnoser loaded from a model file: used as saved, never refitted; its training
    datasets and tasks are declared, so evaluation labels them in-sample."""

    def __init__(self, inner: CalibratedLocalizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.tuned_on = inner.tuned_on
        self.tuned_tasks = inner.tuned_tasks

    def check(self, traj: Trajectory) -> None:
        self.inner.check(traj)

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        return self.inner.localize(traj)

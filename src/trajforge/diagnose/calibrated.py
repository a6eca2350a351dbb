"""The calibrated diagnoser: a localizer's answer with a confidence learned on tuning data,
and the calibrated prior where that confidence is too low.

Fitting (on labelled tuning runs only):
- the prior (`trajforge.diagnose.prior`) is fitted per log format;
- the base localizer runs on every tuning run; each answer falls in a cell (log format, the
  detector or category that produced it) and the cell's exact-hit rate on the tuning runs is
  the confidence of later answers from it. Cells with fewer than `MIN_RUNS` tuning runs use
  the detector's rate over all formats, then the base method's overall rate;
- the threshold of each format is the prior's own exact-hit rate there: below it the base
  answer is expected to do worse than the prior, so the diagnoser abstains and answers with
  the prior (`abstained: true`).
"""

from __future__ import annotations

from collections import defaultdict

from trajforge.diagnose.datasets import log_format
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.localize import Localizer
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.prior import ALL_FORMATS, NOT_FITTED, PriorLocalizer
from trajforge.errors import UserError
from trajforge.schema import Trajectory

MIN_RUNS = 3
ANY = "*"


def answer_kind(diagnosis: Diagnosis | None) -> str:
    """The cell an answer is calibrated in: its detector, else its category."""
    if diagnosis is None or diagnosis.step is None:
        return "none"
    return str(diagnosis.details.get("detector") or diagnosis.category or "any")


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

    def fit(self, runs: list[Trajectory]) -> CalibratedLocalizer:
        labelled = [t for t in runs if reference_label(t) is not None]
        counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for traj in labelled:
            found = self.base.localize(traj)
            label = reference_label(traj)
            hit = int(found is not None and label is not None and found.step == label.message_index)
            kind = answer_kind(found)
            for cell in ((log_format(traj), kind), (ANY, kind), (ANY, ANY)):
                counts[cell][0] += hit
                counts[cell][1] += 1
        rates = {cell: (h, n) for cell, (h, n) in counts.items()}
        return CalibratedLocalizer(self.base, self.prior.fit(labelled), rates)

    def confidence(self, traj: Trajectory, found: Diagnosis | None) -> float:
        kind = answer_kind(found)
        for cell in ((log_format(traj), kind), (ANY, kind), (ANY, ANY)):
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

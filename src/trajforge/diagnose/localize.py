"""Stage 1, localization: the `Localizer` protocol and the registry of methods by name.

A localizer reads one failed run and returns a diagnosis with the decisive step, category,
explanation, cited evidence and a proposed correction (stages 1-3), or None when it cannot
say. `check` runs before anything is diagnosed and raises a `UserError` for a run the method
cannot handle, so a batch fails before it stores anything.
"""

from __future__ import annotations

from typing import Protocol

from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Diagnosis, no_decisive_error
from trajforge.registry import Registry
from trajforge.schema import Trajectory


class Localizer(Protocol):
    name: str

    def check(self, traj: Trajectory) -> None:
        """Raise a `UserError` when this method cannot diagnose `traj`."""
        ...

    def localize(self, traj: Trajectory) -> Diagnosis | None: ...


WHO_AND_WHEN_TUNED = frozenset({"who-and-when/algorithm-generated"})
"""The datasets the heuristics' rules and their order were chosen on (by their labels)."""


class HeuristicLocalizer:
    """Evidence heuristics over the recorded messages (see `trajforge.diagnose.heuristics`).

    Hand-tuned: the multi-agent detectors and their order were chosen on Who&When's
    algorithm-generated runs, so figures there are in-sample."""

    name = "heuristic"
    tuned_on = WHO_AND_WHEN_TUNED
    tuned_tasks: frozenset[str] = frozenset()

    def check(self, traj: Trajectory) -> None:
        return None

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        return localize_heuristic(traj)


class AutoLocalizer:
    """Counterfactual where the run is forkable, heuristics elsewhere (mixed stores)."""

    name = "auto"
    tuned_on = WHO_AND_WHEN_TUNED
    tuned_tasks: frozenset[str] = frozenset()

    def __init__(self) -> None:
        from trajforge.diagnose.counterfactual import CounterfactualLocalizer

        self.counterfactual = CounterfactualLocalizer()
        self.heuristic = HeuristicLocalizer()

    def check(self, traj: Trajectory) -> None:
        return None

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        from trajforge.diagnose.forking import forkable

        if forkable(traj):
            found = self.counterfactual.localize(traj)
            return found or no_decisive_error(traj.id, "counterfactual")
        return self.heuristic.localize(traj) or no_decisive_error(traj.id, "heuristic")


LOCALIZERS: Registry[type] = Registry("diagnosis method")
LOCALIZERS.register("heuristic", "trajforge.diagnose.localize:HeuristicLocalizer")
LOCALIZERS.register("llm", "trajforge.diagnose.judge:LLMJudge")
LOCALIZERS.register("counterfactual", "trajforge.diagnose.counterfactual:CounterfactualLocalizer")
LOCALIZERS.register("auto", "trajforge.diagnose.localize:AutoLocalizer")
LOCALIZERS.register("prior", "trajforge.diagnose.prior:PriorLocalizer")
LOCALIZERS.register("calibrated", "trajforge.diagnose.calibrated:CalibratedLocalizer")
LOCALIZERS.register("trained", "trajforge.diagnose.trained:RankerTrainer")
LOCALIZERS.register("calibrated-trained", "trajforge.diagnose.calibrated:calibrated_trained")

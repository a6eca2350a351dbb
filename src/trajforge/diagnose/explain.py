"""Stages 2-3 for a localizer that only names a message: category, evidence, correction.

The step ranker (`trained`), the calibrated prior and the calibrated diagnoser's fallback
answer with a message index and a speaker only. Their diagnosis is completed here, from the
same readings the other methods use, of that message:

- the heuristic diagnosis, when it names the same message (its category, evidence,
  correction and omission flag);
- else, on a forkable run, the oracle: the expert's action in the state before the message is
  the correction, and the category comes from comparing the two (as the counterfactual
  method explains its decisive message);
- else the diagnosis stays a bare localization (no category, no correction: nothing to
  verify), and says so in `details["explained_by"]`.
"""

from __future__ import annotations

from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Diagnosis
from trajforge.schema import Trajectory


def needs_explaining(diagnosis: Diagnosis) -> bool:
    """A localization without a category or a correction."""
    return diagnosis.step is not None and diagnosis.category is None and not diagnosis.correction


def complete_at_step(traj: Trajectory, diagnosis: Diagnosis) -> Diagnosis:
    """See module docstring; a diagnosis that needs nothing is returned unchanged."""
    if not needs_explaining(diagnosis):
        return diagnosis
    heuristic = localize_heuristic(traj)
    if heuristic is not None and heuristic.step == diagnosis.step:
        return _adopt(diagnosis, heuristic, "heuristic")
    from trajforge.diagnose.forking import forkable

    if forkable(traj):
        return _adopt(diagnosis, _oracle_reading(traj, diagnosis), "oracle")
    diagnosis.details["explained_by"] = None
    return diagnosis


def _adopt(diagnosis: Diagnosis, reading: Diagnosis, source: str) -> Diagnosis:
    diagnosis.category = reading.category
    diagnosis.evidence = reading.evidence
    diagnosis.correction = reading.correction
    diagnosis.omission = reading.omission
    diagnosis.explanation = f"{diagnosis.explanation}; that message, read by the {source}: " + (
        reading.explanation
    )
    diagnosis.details["explained_by"] = source
    return diagnosis


def _oracle_reading(traj: Trajectory, diagnosis: Diagnosis) -> Diagnosis:
    from trajforge.diagnose.counterfactual import (
        as_action,
        check_forkable,
        correction_from,
        expert_action_before,
        explain_step,
    )

    assert diagnosis.step is not None
    env = check_forkable(traj)
    intended = expert_action_before(env, traj, diagnosis.step)
    category, why, evidence = explain_step(traj, diagnosis.step, as_action(intended))
    return Diagnosis(
        trajectory_id=traj.id,
        method="counterfactual",
        step=diagnosis.step,
        category=category,
        explanation=why,
        evidence=evidence,
        correction=correction_from(intended),
    )

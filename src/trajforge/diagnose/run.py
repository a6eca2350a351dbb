"""The AET pipeline over a batch of stored runs: select failures, localize, verify, store.

Nothing is written until every selected run has been diagnosed; the diagnoses are then stored
in one transaction, so a bad input leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import get_args

from trajforge.diagnose.explain import complete_at_step
from trajforge.diagnose.localize import LOCALIZERS, Localizer
from trajforge.diagnose.model import Diagnosis, Method, Verification, no_decisive_error
from trajforge.diagnose.storage import save_diagnoses
from trajforge.diagnose.verify import verify_by_evidence
from trajforge.errors import UserError
from trajforge.models.retry import require_an_answer
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

Progress = Callable[[Trajectory], None]


def is_failure(traj: Trajectory) -> bool:
    """A run to diagnose: judged failed, or not judged but carrying error labels. A run a
    model error ended is never one (the model could not be reached: the agent did not fail)."""
    status = traj.outcome.status
    return status == "failure" or (status == "unjudged" and bool(traj.labels))


def select_failures(store: Store, flt: TrajectoryFilter) -> list[Trajectory]:
    """The failed runs matching `flt`; a clear error when there are none.

    `flt.limit` counts failures, not runs read: `--limit 2` gives two failed runs when the
    filter matches at least two.
    """
    matched, model_errors, failures = 0, 0, []
    for traj in store.query(flt.model_copy(update={"limit": None})):
        matched += 1
        model_errors += traj.outcome.status == "model_error"
        if is_failure(traj):
            failures.append(traj)
            if flt.limit is not None and len(failures) >= flt.limit:
                break
    if not matched:
        raise UserError("no trajectories match the filter; check the options (trajforge ls)")
    if not failures:
        which = "the matching run" if matched == 1 else f"all {matched} matching runs"
        why = "succeeded" if not model_errors else _not_failed(matched, model_errors)
        raise UserError(f"nothing to diagnose: {which} {why} (diagnose reads failed runs)")
    return failures


def _not_failed(matched: int, model_errors: int) -> str:
    ended = "ended" if model_errors == matched else f"succeeded or ({model_errors}) ended"
    return f"{ended} because the model could not be reached (status model_error, not a failure)"


def make_localizer(method: str, **options: object) -> Localizer:
    """A localizer by method name (heuristic, llm, counterfactual) or `module:Class`."""
    return LOCALIZERS.get(method)(**options)


def verify(traj: Trajectory, diagnosis: Diagnosis) -> Verification:
    """Stage 4: by fork where the run can be replayed, else against the recorded evidence."""
    from trajforge.diagnose import forking

    if diagnosis.step is None:
        return Verification(method="none", verified=False, detail="no decisive step found")
    if forking.forkable(traj):
        return forking.verify_by_fork(traj, diagnosis)
    return verify_by_evidence(traj, diagnosis, forking.tool_schemas(traj))


def recorded_method(name: str) -> Method:
    """The diagnosis method a localizer named `name` records; an unknown name is an error
    (never recorded as another method)."""
    method: Method | None = next((m for m in get_args(Method) if m == name), None)
    if method is None:
        known = ", ".join(get_args(Method))
        raise UserError(f"localizer '{name}': its name must be a diagnosis method ({known})")
    return method


def diagnose_run(traj: Trajectory, localizer: Localizer) -> Diagnosis:
    """Stages 1-4 on one failed run (the diagnosis is returned, not stored); a localizer that
    names only a message gets its category and correction from `explain.complete_at_step`."""
    diagnosis = localizer.localize(traj)
    if diagnosis is None:
        diagnosis = no_decisive_error(traj.id, recorded_method(localizer.name))
    diagnosis = complete_at_step(traj, diagnosis)
    diagnosis.verification = verify(traj, diagnosis)
    diagnosis.details.setdefault("first_proposal_verified", diagnosis.verified)
    return diagnosis.with_id()


def diagnose_runs(
    trajs: Iterable[Trajectory], localizer: Localizer, on_run: Progress | None = None
) -> list[Diagnosis]:
    """Check every run first (a method that cannot handle one fails before any work)."""
    runs = list(trajs)
    for traj in runs:
        localizer.check(traj)
    results = []
    for traj in runs:
        results.append(diagnose_run(traj, localizer))
        if on_run is not None:
            on_run(traj)
    return results


def diagnose_store(
    store: Store,
    flt: TrajectoryFilter,
    localizer: Localizer,
    on_run: Progress | None = None,
    save: bool = True,
    on_selected: Callable[[int], object] | None = None,
) -> list[Diagnosis]:
    """Diagnose the failed runs matching `flt` and store the diagnoses together;
    `on_selected` hears how many runs were selected, `on_run` each one diagnosed."""
    runs = select_failures(store, flt)
    if on_selected is not None:
        on_selected(len(runs))
    diagnoses = diagnose_runs(runs, localizer, on_run)
    failed_calls = [d.details.get("failed_call") for d in diagnoses]
    require_an_answer(failed_calls, what="diagnosis", kept="no diagnosis was stored")
    if save:
        save_diagnoses(store, diagnoses)
    return diagnoses

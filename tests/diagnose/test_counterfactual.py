"""Counterfactual localization and fork verification on real tau-bench failures."""

from __future__ import annotations

import pytest

from trajforge.diagnose.counterfactual import CounterfactualLocalizer, continue_from, cut_after
from trajforge.diagnose.eval import evaluate
from trajforge.diagnose.forking import verify_by_fork
from trajforge.diagnose.model import Correction
from trajforge.diagnose.run import diagnose_run, diagnose_runs
from trajforge.diagnose.synthetic import SyntheticConfig, synthetic_failures
from trajforge.envs import make_env
from trajforge.errors import UserError
from trajforge.schema import ToolCall, Trajectory

from .conftest import pick


def test_decisive_step_of_a_real_airline_failure(airline_runs: list[Trajectory]) -> None:
    """Airline task 0, trial 0 (gpt-4o), checked by hand.

    Mia Li books JFK->SEA one way in economy and never asks for paid bags (gold booking:
    nonfree_baggages 0, $250 certificate + $5 card). Message 20 books with nonfree_baggages
    1 and fails ("payment amount does not add up"): no state change, the expert could still
    book correctly. Message 28 books again with nonfree_baggages 1 and $55 on the card, and
    it succeeds: the database now holds a booking the task does not want. V is true after
    every agent message up to 26 and false after 28, so 28 is the decisive error, and the
    correction is the gold booking.
    """
    traj = pick(airline_runs, "0")
    diagnosis = CounterfactualLocalizer().localize(traj)
    assert diagnosis is not None
    assert diagnosis.step == 28
    assert diagnosis.category == "tool_misuse"
    values = diagnosis.details["V"]
    assert values["20"] is True and values["26"] is True and values["28"] is False
    assert all(values[str(i)] for i in traj.assistant_indices() if i < 28)
    fix = diagnosis.correction
    assert fix is not None and fix.tool_call is not None and fix.source == "oracle"
    assert fix.tool_call.name == "book_reservation"
    assert fix.tool_call.parsed_arguments()["nonfree_baggages"] == 0


def test_correction_verified_by_a_successful_fork(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = diagnose_run(traj, CounterfactualLocalizer())
    assert diagnosis.verification is not None
    assert diagnosis.verification.method == "fork"
    assert diagnosis.verified and diagnosis.details["first_proposal_verified"] is True
    env = make_env(traj)
    fork = continue_from(env, traj, 28, diagnosis.correction.as_message())
    assert fork.outcome.success is True
    assert fork.parent is not None and fork.parent.message_index == 28
    assert [m.model_dump() for m in fork.messages[:28]] == [
        m.model_dump() for m in traj.messages[:28]
    ]
    assert fork.messages[28].tool_calls[0].name == "book_reservation"


def test_wrong_correction_fails_then_oracle_is_tried(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = CounterfactualLocalizer().localize(traj)
    assert diagnosis is not None
    wrong = traj.messages[28].tool_calls[0].model_copy(update={"id": "again"})
    diagnosis.correction = Correction(tool_call=wrong, source="test")
    verdict = verify_by_fork(traj, diagnosis)
    assert diagnosis.details["first_proposal_verified"] is False
    assert verdict.verified  # the oracle's booking, tried second, succeeds
    assert diagnosis.correction.source == "oracle"
    assert "first proposal: fork at message 28" in verdict.detail and "failure" in verdict.detail


def test_omission_at_the_end(retail_runs: list[Trajectory]) -> None:
    """Retail task 2, trial 2: the return is done right, but the user also asked how many
    t-shirt options are available (gold output "10") and the agent said 11 (message 6).
    The expert can still state 10 after every agent message, so V never drops and the
    point of no return is the omission at the agent's last message (30)."""
    traj = next(t for t in retail_runs if t.task.id == "2" and not t.success)
    diagnosis = diagnose_run(traj, CounterfactualLocalizer())
    assert (diagnosis.step, diagnosis.omission) == (30, True)
    assert diagnosis.point_of_no_return == 30
    assert diagnosis.category == "premature_termination"
    assert diagnosis.correction is not None and "10" in (diagnosis.correction.message or "")
    assert diagnosis.verified


def test_first_deviation_is_the_wrong_answer(retail_runs: list[Trajectory]) -> None:
    """Same run (74776b59). What is there: message 5, the tool, lists 12 T-shirt variants,
    10 of them available; message 6 says "there are 11 available T-shirt options"; nothing
    later states 10. The oracle distance stays 2 across message 6 (one gold return and the
    unsaid answer), so the first deviation is found as a wrong statement: 11 is a whole
    number like the required 10, and no earlier message shows an 11. With 10 in its place
    and the run's own later turns replayed, the run succeeds."""
    traj = next(t for t in retail_runs if t.task.id == "2" and not t.success)
    assert traj.id.startswith("74776b59")
    assert "11 available T-shirt options" in traj.messages[6].text()
    diagnosis = CounterfactualLocalizer().localize(traj)
    assert diagnosis is not None and diagnosis.first_deviation is not None
    deviation = diagnosis.first_deviation
    assert deviation.message_index <= 6 < (diagnosis.point_of_no_return or 0)
    assert (deviation.message_index, deviation.reason) == (6, "wrong_statement")
    assert deviation.correction is not None
    assert "there are 10 available T-shirt options" in (deviation.correction.message or "")
    assert deviation.repaired is True and "success" in deviation.repair_detail


def test_run_without_environment_is_refused(who_and_when_runs: list[Trajectory]) -> None:
    with pytest.raises(UserError, match="cannot be replayed"):
        diagnose_runs(who_and_when_runs[:2], CounterfactualLocalizer())


def test_cut_keeps_tool_results(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    assert cut_after(traj, 28) == 30  # the booking and its result
    assert cut_after(traj, 26) == 27  # a text message


def test_synthetic_failures_localized_exactly() -> None:
    runs = synthetic_failures(SyntheticConfig(environment="tau-retail", failures=12))
    assert len(runs) == 12
    assert all(label.source == "oracle" for t in runs for label in t.labels)
    diagnoses = diagnose_runs(runs, CounterfactualLocalizer())
    report = evaluate("counterfactual", list(zip(runs, diagnoses, strict=True)))
    assert report.runs == 12
    assert report.exact is not None and report.exact >= 0.95
    assert report.verified_rate == 1.0


def test_invalid_call_in_fork_is_not_verified(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = CounterfactualLocalizer().localize(traj)
    assert diagnosis is not None
    bad = ToolCall(id="bad", name="book_reservation", arguments="{}")
    diagnosis.correction = Correction(tool_call=bad, source="test")
    diagnosis.step = 30  # after the wrong booking: no proposal can succeed any more
    verdict = verify_by_fork(traj, diagnosis)
    assert not verdict.verified


def test_step_budget_decides_in_a_recoverable_environment() -> None:
    """Household tasks can always be recovered, so a noisy run fails only by running out of
    steps. V(t) uses the run's own budget (12 agent steps here): the decisive step is the
    deliberate detour after which the steps left no longer suffice for the expert; the
    earlier detours (message 6, 10) still left enough steps."""
    from trajforge.agents.expert import NoisyExpertPolicy
    from trajforge.envs import ENVIRONMENTS
    from trajforge.rollout.episode import Limits, run_episode

    env_class = ENVIRONMENTS.get("household")
    task = env_class().tasks(count=2, seed=0)[1]
    policy = NoisyExpertPolicy(error_rate=0.5, seed=0)
    run = run_episode(env_class(), policy, task, limits=Limits(max_steps=12)).with_id()
    assert (run.outcome.termination_reason, run.success) == ("max_steps", False)
    labelled = [label.message_index for label in run.labels]
    diagnosis = CounterfactualLocalizer().localize(run)
    assert diagnosis is not None and diagnosis.step is not None
    assert diagnosis.step in labelled and diagnosis.step > labelled[0]
    values = diagnosis.details["V"]
    assert values[str(diagnosis.step)] is False
    assert all(v for k, v in values.items() if int(k) < diagnosis.step)
    deviation = diagnosis.first_deviation  # the first detour: the oracle distance rises
    assert deviation is not None and deviation.reason == "distance_increased"
    assert deviation.message_index == labelled[0] < diagnosis.step


def test_numbers_a_message_states() -> None:
    """List markers, ids inside words and thousands separators are read as a user would."""
    from trajforge.diagnose.deviation import numbers_in

    text = "1. **Vacuum** - $561.05\n2. order #W2378156: total $1,095.55, 5-7 days"
    assert numbers_in(text) == ["561.05", "1095.55", "5", "7"]


def test_a_wrong_number_is_replaced_as_written() -> None:
    from trajforge.diagnose.deviation import corrected_statement
    from trajforge.schema import Message

    said = Message(role="assistant", content="1. Total New Price: $1,625 (was $189).")
    fixed = corrected_statement(said, "1625", "1786")
    assert fixed.message == "1. Total New Price: $1786 (was $189)."

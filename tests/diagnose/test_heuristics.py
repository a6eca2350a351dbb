"""Evidence heuristics on real runs: tau-bench (gold actions recorded) and Who&When."""

from __future__ import annotations

from pathlib import Path

from trajforge.diagnose.eval import evaluate
from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.heuristics.tool_log import localize_tool_log
from trajforge.diagnose.localize import HeuristicLocalizer
from trajforge.diagnose.run import diagnose_runs
from trajforge.importers.mini_swe_agent import MiniSweAgentImporter
from trajforge.schema import Trajectory

from .conftest import pick

SWE_RUN = (
    "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/astropy__astropy-14182/"
    "astropy__astropy-14182.traj.json"
)


def test_wrong_write_found_by_gold_diff(airline_runs: list[Trajectory]) -> None:
    """Airline task 0, trial 0 (gpt-4o), read by hand.

    The user wants one-way JFK->SEA in economy, pays with certificate then card, and says
    nothing about checked bags; the gold booking has nonfree_baggages 0. At message 20 the
    agent books with nonfree_baggages 1: the call fails (price mismatch), so the state is
    unchanged. At message 28 it books again with nonfree_baggages 1 and the booking
    succeeds: from then on the database cannot equal the gold one. Decisive step: 28.
    """
    traj = pick(airline_runs, "0")
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    assert diagnosis.step == 28
    assert diagnosis.category == "tool_misuse"
    assert "nonfree_baggages" in diagnosis.explanation
    assert diagnosis.correction is not None and diagnosis.correction.tool_call is not None
    assert '"nonfree_baggages":0' in diagnosis.correction.tool_call.arguments
    assert {e.message_index for e in diagnosis.evidence} >= {28, 29}


def test_every_tau_failure_gets_a_step(
    airline_runs: list[Trajectory], retail_runs: list[Trajectory]
) -> None:
    runs = [t for t in airline_runs + retail_runs if not t.success]
    assert len(runs) == 143
    diagnoses = diagnose_runs(runs, HeuristicLocalizer())
    assert all(d.step is not None for d in diagnoses)
    for traj, diagnosis in zip(runs, diagnoses, strict=True):
        assert traj.messages[diagnosis.step].role == "assistant"


def test_tool_log_detectors_without_gold(airline_runs: list[Trajectory]) -> None:
    """Without gold actions the same run shows no ignored error (the agent recomputed after
    the failed booking) and both bookings were confirmed, so the end is blamed; once the
    user's confirmation before message 28 is removed, that write is a policy violation."""
    traj = pick(airline_runs, "0")
    traj.task.gold = None
    ending = localize_tool_log(traj)
    assert ending is not None
    assert (ending.step, ending.omission, ending.details["detector"]) == (30, True, "last-step")
    traj.messages[27].content = "Hmm, and what about my bags?"
    violation = localize_tool_log(traj)
    assert violation is not None
    assert (violation.step, violation.category) == (28, "policy_violation")


def test_who_and_when_heuristics_beat_constant_baselines(
    who_and_when_runs: list[Trajectory],
) -> None:
    runs = who_and_when_runs
    assert len(runs) == 126
    diagnoses = diagnose_runs(runs, HeuristicLocalizer())
    report = evaluate("heuristic", list(zip(runs, diagnoses, strict=True)))
    assert report.runs == 126
    assert report.exact > report.baseline_exact
    assert report.within3 >= report.baseline_within3
    assert report.agent > report.baseline_agent
    assert all(not d.verified for d in diagnoses)  # free-text fixes cannot be verified


def test_reused_call_ids_pair_each_call_with_its_own_result(
    airline_runs: list[Trajectory],
) -> None:
    """Airline task 13, trial 0: the model reuses the id of the failed call at message 46
    for the call at 54. The failed update (46, "Error: flight HAT030 not available") changed
    nothing; the update at 54 succeeded and is the unwanted write (the task asks for a hand
    over to a human agent only)."""
    traj = pick(airline_runs, "13")
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    assert (diagnosis.step, diagnosis.category) == (54, "wrong_plan")


def test_gold_write_done_too_early(retail_runs: list[Trajectory]) -> None:
    """Retail task 41: the user wants the address and the items of order changed. The agent
    modifies the items first (message 16, the exact gold call); a pending order whose items
    were modified can no longer be changed, so the address change that had to come first is
    now impossible. The agent later hands off (22), but 16 is where the task was lost."""
    traj = pick(retail_runs, "41", trial=41)
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    assert (diagnosis.step, diagnosis.category) == (16, "wrong_plan")
    assert diagnosis.correction is not None and diagnosis.correction.tool_call is not None
    assert diagnosis.correction.tool_call.name == "modify_pending_order_address"


def test_repeated_shell_command_with_same_output_is_looping(shared_data: Path) -> None:
    """mini-swe-agent on astropy-14182 (failed): `cat astropy/io/ascii/rst.py` is run at
    messages 8, 12 and 26 and prints the unchanged file each time; the agent meant to apply
    its change (message 26 says so) but keeps re-reading instead."""
    path = shared_data / SWE_RUN
    (traj,) = [t.with_id() for t in MiniSweAgentImporter().read(path)]
    assert traj.success is False
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    assert (diagnosis.step, diagnosis.category) == (26, "looping")
    assert [e.message_index for e in diagnosis.evidence] == [8, 26]


def test_secondary_findings_are_cited_beside_the_decisive_step(
    who_and_when_runs: list[Trajectory],
) -> None:
    """Who&When run 18: the search script fails at message 5 (exit code 1, a TypeError),
    and message 6 reads the partial results without taking up the failure; message 9
    declares "Stanza 3" final although no execution ever succeeded. Both are recorded beside
    the decisive step, which the primary detectors keep at the first contribution."""
    traj = who_and_when_runs[17]
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None and diagnosis.step == 1
    others = {(o["step"], o["category"]) for o in diagnosis.details["other_findings"]}
    assert others == {(6, "misread_tool_output"), (9, "premature_termination")}
    assert {6, 9} <= {e.message_index for e in diagnosis.evidence}

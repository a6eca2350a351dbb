"""Verification against recorded evidence, and the tool-schema check."""

from __future__ import annotations

from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Correction, Evidence
from trajforge.diagnose.schema_check import call_problems
from trajforge.diagnose.verify import UNVERIFIABLE, verify_by_evidence
from trajforge.schema import ToolCall, Trajectory

from .conftest import pick

BOOK_TOOL = {
    "type": "function",
    "function": {
        "name": "book_reservation",
        "parameters": {
            "type": "object",
            "properties": {
                "user_id": {"type": "string"},
                "origin": {"type": "string"},
                "destination": {"type": "string"},
                "flight_type": {"type": "string", "enum": ["one_way", "round_trip"]},
                "cabin": {"type": "string"},
                "flights": {"type": "array", "items": {"type": "object"}},
                "passengers": {"type": "array", "items": {"type": "object"}},
                "payment_methods": {"type": "array", "items": {"type": "object"}},
                "total_baggages": {"type": "integer"},
                "nonfree_baggages": {"type": "integer"},
                "insurance": {"type": "string", "enum": ["yes", "no"]},
            },
            "required": ["user_id", "origin", "destination", "flights", "payment_methods"],
        },
    },
}


def test_schema_check_finds_each_kind_of_problem() -> None:
    def problems(arguments: str, name: str = "book_reservation") -> list[str]:
        return call_problems(ToolCall(id="c", name=name, arguments=arguments), [BOOK_TOOL])

    assert problems("{}", "no_such_tool") == ["no tool named no_such_tool"]
    assert "not a JSON object" in problems("[1]")[0]
    missing = problems('{"user_id": "u"}')
    assert any("origin: required" in p for p in missing)
    full = '{"user_id":"u","origin":"A","destination":"B","flights":[],"payment_methods":[]}'
    assert problems(full) == []
    assert problems(full[:-1] + ',"total_baggages":"3"}') == [
        "total_baggages: expected integer, got str"
    ]
    assert problems(full[:-1] + ',"total_baggages":true}') == [
        "total_baggages: expected integer, got bool"
    ]
    assert "not one of" in problems(full[:-1] + ',"insurance":"maybe"}')[0]
    assert problems(full[:-1] + ',"seat":"1A"}') == ["seat: unknown field"]


def test_gold_correction_verified_by_evidence(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    verdict = verify_by_evidence(traj, diagnosis, [BOOK_TOOL])
    assert verdict.verified, verdict.detail
    assert verdict.method == "evidence"


def test_wrong_citation_fails(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    diagnosis.evidence.append(Evidence(message_index=3, quote="cancel my trip"))
    verdict = verify_by_evidence(traj, diagnosis, [BOOK_TOOL])
    assert not verdict.verified
    assert "message 3 does not contain 'cancel my trip'" in verdict.detail
    diagnosis.evidence = [Evidence(message_index=99)]
    assert "cited message 99 does not exist" in verify_by_evidence(traj, diagnosis, []).detail


def test_invalid_corrected_call_fails(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None
    diagnosis.correction = Correction(
        tool_call=ToolCall(id="x", name="book_reservation", arguments='{"user_id": 7}'),
        source="test",
    )
    verdict = verify_by_evidence(traj, diagnosis, [BOOK_TOOL])
    assert not verdict.verified
    assert "user_id: expected string" in verdict.detail


def test_free_text_correction_is_marked_unverifiable(
    who_and_when_runs: list[Trajectory],
) -> None:
    traj = who_and_when_runs[0]
    diagnosis = localize_heuristic(traj)
    assert diagnosis is not None and diagnosis.correction is not None
    assert diagnosis.correction.tool_call is None
    verdict = verify_by_evidence(traj, diagnosis, [])
    assert not verdict.verified
    assert verdict.detail.startswith(UNVERIFIABLE)

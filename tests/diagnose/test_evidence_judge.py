"""The evidence-first judge: a validation log computed without a model, cited by id."""

from __future__ import annotations

import orjson

from trajforge.diagnose.judge import REPORT_TOOL, JudgeConfig, LLMJudge
from trajforge.diagnose.validation import validation_log
from trajforge.models import OpenAICompatibleModel, OpenAIModelConfig, ScriptedModel
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.schema import Message, Task, ToolCall, Trajectory

from .conftest import pick


def _call(report: dict) -> Message:
    call = ToolCall(id="r1", name=REPORT_TOOL, arguments=orjson.dumps(report).decode())
    return Message(role="assistant", tool_calls=[call])


def _looping_run() -> Trajectory:
    call = ToolCall(id="c1", name="get_order", arguments='{"order_id": "#W1"}')
    again = call.model_copy(update={"id": "c2"})
    messages = [
        Message(role="user", content="Where is my order #W1?"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", tool_call_id="c1", content="Error: order not found"),
        Message(role="assistant", content="Your order has been successfully shipped."),
        Message(role="assistant", tool_calls=[again]),
        Message(role="tool", tool_call_id="c2", content="Error: order not found"),
    ]
    return Trajectory(task=Task(id="t", environment="x"), messages=messages).with_id()


def test_validation_log_finds_errors_claims_and_repeats() -> None:
    findings = validation_log(_looping_run())
    kinds = [(f.id, f.kind, f.message_index) for f in findings]
    assert ("E1", "tool_error", 2) in kinds
    assert any(k == "contradicted_claim" and i == 3 for _, k, i in kinds)
    assert any(k == "repeated_action" and i == 4 for _, k, i in kinds)
    assert [f.id for f in findings] == [f"E{n}" for n in range(1, len(findings) + 1)]


def test_a_citation_that_does_not_exist_invalidates_the_answer() -> None:
    traj = _looping_run()
    bogus = LLMJudge(ScriptedModel([_call({"step": 3, "evidence_ids": ["E99"]})]))
    invalid = bogus.localize(traj)
    assert invalid is not None and invalid.step is None and "E99" in invalid.details["invalid"]
    silent = LLMJudge(ScriptedModel([_call({"step": 3, "evidence_ids": []})])).localize(traj)
    assert silent is not None and silent.step is None
    good = {"step": 3, "category": "misread_tool_output", "evidence_ids": ["e1"], "confidence": 0.7}
    valid = LLMJudge(ScriptedModel([_call(good)])).localize(traj)
    assert valid is not None and (valid.step, valid.confidence) == (3, 0.7)
    assert valid.details["evidence_ids"] == ["E1"]
    assert valid.details["cited_findings"][0]["kind"] == "tool_error"


def test_step_by_step_skips_answers_citing_findings_not_yet_shown() -> None:
    traj = _looping_run()
    # at step 1 the log shown is empty of later findings: citing E1 (message 2) is invalid
    replies = [
        _call({"error": True, "step": 1, "evidence_ids": ["E1"]}),
        _call({"error": True, "step": 3, "evidence_ids": ["E1"]}),
    ]
    judge = LLMJudge(ScriptedModel(replies), config=JudgeConfig(mode="step-by-step"))
    found = judge.localize(traj)
    assert found is not None and found.step == 3
    assert found.details["rejected_answers"][0]["step"] == 1


def test_evidence_judge_over_the_mock_server(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    (first, *_) = validation_log(traj)
    report = {"step": 28, "category": "tool_misuse", "evidence_ids": [first.id]}
    with MockOpenAIServer([{"tool_calls": [{"name": REPORT_TOOL, "arguments": report}]}]) as s:
        model = OpenAICompatibleModel(
            OpenAIModelConfig(base_url=s.base_url, model="judge", api_key="x")
        )
        diagnosis = LLMJudge(model).localize(traj)
        request = s.requests[-1]
    assert diagnosis is not None and diagnosis.step == 28
    prompt = request["messages"][-1]["content"]
    assert "Validation log" in prompt and f"[{first.id}]" in prompt
    schema = request["tools"][0]["function"]["parameters"]
    assert "evidence_ids" in schema["required"]

"""The LLM judge with the package's scripted model and the mock OpenAI-compatible server."""

from __future__ import annotations

import orjson

from trajforge.diagnose.judge import REPORT_TOOL, JudgeConfig, LLMJudge, parse_report
from trajforge.models import OpenAICompatibleModel, OpenAIModelConfig, ScriptedModel
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.schema import Message, ToolCall, Trajectory

from .conftest import pick

PLAIN = JudgeConfig(evidence_first=False)
REPORT = {
    "step": 28,
    "category": "tool_misuse",
    "explanation": "[28] books with one paid bag; the user asked for none",
    "evidence": [{"message_index": 28, "quote": "nonfree_baggages", "note": "the booking"}],
    "correction": {"tool": "book_reservation", "arguments": {"nonfree_baggages": 0}},
}


def _report_call(report: dict) -> Message:
    call = ToolCall(id="r1", name=REPORT_TOOL, arguments=orjson.dumps(report).decode())
    return Message(role="assistant", tool_calls=[call])


def test_all_at_once_reads_the_report_call(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    diagnosis = LLMJudge(ScriptedModel([_report_call(REPORT)]), config=PLAIN).localize(traj)
    assert diagnosis is not None
    assert (diagnosis.step, diagnosis.category, diagnosis.method) == (28, "tool_misuse", "llm")
    assert diagnosis.agent == "assistant"
    assert diagnosis.correction is not None and diagnosis.correction.tool_call is not None
    assert diagnosis.correction.tool_call.name == "book_reservation"
    assert diagnosis.evidence[0].message_index == 28


def test_json_text_answers_and_bad_answers() -> None:
    fenced = Message(role="assistant", content='```json\n{"step": 3, "category": "looping"}\n```')
    assert parse_report(fenced) == {"step": 3, "category": "looping"}
    assert parse_report(Message(role="assistant", content="I think step 3.")) is None


def test_unusable_answer_gives_no_step(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    out_of_range = LLMJudge(ScriptedModel([_report_call({"step": 999})]), config=PLAIN).localize(
        traj
    )
    assert out_of_range is not None and out_of_range.step is None
    assert "not in the run" in out_of_range.explanation
    prose = LLMJudge(ScriptedModel(["no idea"] * 3), config=PLAIN).localize(traj)
    assert prose is not None and prose.step is None and "no idea" in prose.explanation


def test_odd_shapes_of_a_small_models_answer_are_invalid_or_ignored_never_a_crash(
    airline_runs: list[Trajectory],
) -> None:
    traj = pick(airline_runs, "0")

    def judged(report: dict):
        return LLMJudge(ScriptedModel([_report_call(report)]), config=PLAIN).localize(traj)

    listed = judged({**REPORT, "category": ["tool_misuse"]})  # a TypeError before
    assert listed is not None and listed.step == 28 and listed.category is None
    for evidence in (3, "[28]", [{"message_index": 999}]):  # kept as they came before
        answer = judged({**REPORT, "evidence": evidence})
        assert answer is not None and answer.step is None and answer.evidence == []
        assert answer.failure() and answer.failure().startswith("invalid: ")
        assert answer.summary()["failure"] == answer.failure()
    assert judged(REPORT).summary()["evidence_messages"] == [28]


def test_step_by_step_stops_at_first_flagged_step(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    assistant_steps = traj.assistant_indices()
    flagged = assistant_steps.index(28)
    replies = [_report_call({"error": False, "step": 0})] * flagged
    replies.append(_report_call({"error": True, "step": 0, "category": "tool_misuse"}))
    model = ScriptedModel(replies)
    config = JudgeConfig(mode="step-by-step", evidence_first=False)
    diagnosis = LLMJudge(model, config=config).localize(traj)
    assert diagnosis is not None
    assert diagnosis.step == 28  # the asked step wins over the step the judge wrote


def test_judge_over_mock_openai_server(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    reply = {"tool_calls": [{"name": REPORT_TOOL, "arguments": REPORT}]}
    with MockOpenAIServer([reply]) as server:
        model = OpenAICompatibleModel(
            OpenAIModelConfig(base_url=server.base_url, model="judge", api_key="x")
        )
        diagnosis = LLMJudge(model, config=PLAIN).localize(traj)
        request = server.requests[-1]
    assert diagnosis is not None and diagnosis.step == 28
    assert request["tools"][0]["function"]["name"] == REPORT_TOOL


def test_unreachable_endpoint_is_recorded_as_a_failed_call(airline_runs: list[Trajectory]) -> None:
    with MockOpenAIServer([]) as server:
        base_url = server.base_url  # the port is free again once the server stops
    config = OpenAIModelConfig(base_url=base_url, model="judge", api_key="x", max_retries=0)
    judge = LLMJudge(OpenAICompatibleModel(config))
    diagnosis = judge.localize(pick(airline_runs, "0"))
    assert diagnosis is not None and diagnosis.step is None
    assert f"model call to {base_url}/chat/completions failed" in diagnosis.details["failed_call"]
    assert "no diagnosis" in diagnosis.explanation


def test_unparseable_reply_is_retried_then_recorded(airline_runs: list[Trajectory]) -> None:
    traj = pick(airline_runs, "0")
    junk = "I think it went wrong somewhere."
    retried = LLMJudge(ScriptedModel([junk, _report_call(REPORT)]), config=PLAIN).localize(traj)
    assert retried is not None and retried.step == 28
    failed = LLMJudge(ScriptedModel([junk] * 3), config=PLAIN).localize(traj)
    assert failed is not None and failed.step is None
    assert "unparseable reply" in failed.details["failed_call"] and junk in failed.explanation

"""The model-based prefix monitor: it sees only the prefix, and its answers reach the right runs."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import UserError
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.monitor.judge import (
    RISK_TOOL,
    PrefixJudge,
    PrefixJudgeConfig,
    judge_at_step,
    parse_risk,
    prefix_prompt,
)
from trajforge.monitor.steps import extract_steps
from trajforge.schema import Message, ToolCall

STEP = 5


def _model(server: MockOpenAIServer) -> OpenAICompatibleModel:
    config = OpenAIModelConfig(base_url=server.base_url, model="judge", api_key="x", max_retries=0)
    return OpenAICompatibleModel(config)


def _oracle_script(trajs):
    """Answers 0.8 for the runs that failed and 0.2 for the others, recognized by task text."""
    failed = {f"Task:\n{t.task.instruction[:8000]}\n\n": not t.outcome.success for t in trajs}

    def reply(request: dict) -> dict:
        prompt = request["messages"][-1]["content"]
        (outcome,) = [lost for task, lost in failed.items() if prompt.startswith(task)]
        probability = 0.8 if outcome else 0.2
        arguments = {"failure_probability": probability, "reason": "scripted"}
        return {"tool_calls": [{"name": RISK_TOOL, "arguments": arguments}]}

    return reply


def test_the_prompt_shows_the_prefix_and_nothing_later(swe_trajs):
    traj = next(t for t in swe_trajs if len(t.assistant_indices()) > STEP + 2)
    steps = extract_steps(traj)
    prompt = prefix_prompt(traj, STEP, PrefixJudgeConfig(max_message_chars=100_000))[-1].text()
    assert steps[STEP - 1].text[-200:] in prompt  # the k-th action is shown
    assert steps[STEP - 1].observation[-200:] in prompt  # and what it returned
    assert steps[STEP].text[:200] not in prompt  # the next action is not
    assert f"({STEP} agent steps)" in prompt


def test_a_long_prefix_keeps_its_latest_messages(swe_trajs):
    traj = max(swe_trajs, key=lambda t: len(t.assistant_indices()))
    config = PrefixJudgeConfig(max_message_chars=400, max_run_chars=6000)
    prompt = prefix_prompt(traj, 40, config)[-1].text()
    assert "earlier messages left out" in prompt
    assert extract_steps(traj)[39].observation[-150:] in prompt
    assert len(prompt) < 6000 + config.max_task_chars + 500


def test_judging_a_step_the_run_does_not_have_is_a_clear_error(swe_trajs):
    traj = swe_trajs[0]
    with pytest.raises(UserError, match="cannot judge step"):
        prefix_prompt(traj, len(traj.assistant_indices()) + 1, PrefixJudgeConfig())


@pytest.mark.parametrize(
    ("reply", "risk"),
    [
        (Message(role="assistant", content='Sure: {"failure_probability": 0.7}'), 0.7),
        (Message(role="assistant", content='{"failure_probability": 1.5}'), None),
        (Message(role="assistant", content='{"failure_probability": true}'), None),
        (Message(role="assistant", content="no idea"), None),
        (
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall(id="c", name=RISK_TOOL, arguments='{"failure_probability": 0}')
                ],
            ),
            0.0,
        ),
    ],
)
def test_parse_risk(reply, risk):
    assert parse_risk(reply) == risk


def test_answers_from_a_real_endpoint_reach_the_right_runs(swe_trajs):
    trajs = swe_trajs[:40]
    with MockOpenAIServer(_oracle_script(trajs)) as server:
        summary = judge_at_step(PrefixJudge(_model(server)), trajs, STEP, workers=4)
        requests = list(server.requests)
    going = [t for t in trajs if len(t.assistant_indices()) > STEP]
    assert summary["runs"] == len(going) == len(requests)
    assert summary["auroc"] == 1.0  # any answer routed to the wrong run would break this
    assert all(r["tools"][0]["function"]["name"] == RISK_TOOL for r in requests)
    assert summary["risks"][going[0].id] == (0.8 if not going[0].outcome.success else 0.2)


def test_unusable_answers_are_retried_counted_and_the_batch_goes_on(swe_trajs):
    going = [t for t in swe_trajs if len(t.assistant_indices()) > STEP][:4]
    bad = going[0]
    oracle = _oracle_script(going)

    def reply(request: dict):
        if request["messages"][-1]["content"].startswith(f"Task:\n{bad.task.instruction[:8000]}"):
            return "I would rather not say."
        return oracle(request)

    with MockOpenAIServer(reply) as server:
        summary = judge_at_step(PrefixJudge(_model(server)), going, STEP, workers=2)
        calls = len(server.requests)
    assert summary["failed_calls"] == 1 and summary["runs"] == len(going) - 1
    assert (
        "unparseable reply" in summary["failures"][bad.id]
        and "rather not" in summary["failures"][bad.id]
    )
    assert calls == 3 + len(going) - 1  # three attempts at the bad run, one at each other
    with (
        MockOpenAIServer(["I would rather not say."] * 3) as server,
        pytest.raises(UserError, match="every call failed"),
    ):
        judge_at_step(PrefixJudge(_model(server)), [bad], STEP, workers=1)


def test_monitor_judge_command(monitor_db, swe_trajs):
    trajs = swe_trajs[:12]
    with MockOpenAIServer(_oracle_script(trajs)) as server:
        args = ["--db", str(monitor_db), "--harness", "mini-swe-agent", "--limit", "12"]
        endpoint = ["--base-url", server.base_url, "--llm-model", "judge", "--api-key", "x"]
        result = CliRunner().invoke(
            app, ["monitor", "judge", "--step", str(STEP), *endpoint, *args, "--json"]
        )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["judge"] == "judge" and summary["runs"] == 12
    assert set(summary["risks"]) == {t.id for t in trajs}

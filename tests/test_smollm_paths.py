"""The commands that ask a model, each run once against `trajforge serve smollm2-135m` on
loopback (the session's `smollm_served`, short answers): the `llm` policy through the
recording proxy, the LLM user simulator, `diagnose --method llm`, recover's guidance writer
and `monitor judge`. A 135M model's answers are often unusable; what is asserted is the wire
format and that an unusable answer is a recorded, counted failure (or a failed command
naming it), never a crash or a silent success. Quality is not asserted."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tests.conftest import SMOLLM2
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.models.tool_text import ERRORS_FIELD
from trajforge.schema import Message, Outcome, Source, Task, ToolCall, Trajectory
from trajforge.store import Store

pytestmark = pytest.mark.timeout(900)  # a guard against a hang on a loaded CPU, not a goal

LOOKUP = {
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look up an order by its id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}


def _model(url: str) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(
        OpenAIModelConfig(base_url=url, model=SMOLLM2, api_key="x", max_retries=0, timeout_s=600)
    )


def _shop_run(order: int, success: bool) -> Trajectory:
    """A two-step tool-using run: look the order up, then claim it is cancelled."""
    asked = {"order_id": f"W{order}"}
    found = {**asked, "status": "pending"} if success else {"error": f"order W{order} not found"}
    call = ToolCall(id="c1", name="get_order", arguments=orjson.dumps(asked).decode())
    answer = orjson.dumps(found).decode()
    messages = [
        Message(role="system", content="You are a shop assistant. Use the tools."),
        Message(role="user", content=f"Please cancel my order W{order}."),
        Message(role="assistant", content="Let me look it up.", tool_calls=[call]),
        Message(role="tool", tool_call_id="c1", name="get_order", content=answer),
        Message(role="assistant", content="Your order is cancelled."),
    ]
    return Trajectory(
        task=Task(id=f"shop-{order}", environment="toy-shop", instruction=messages[1].text()),
        source=Source(harness="test", model="scripted"),
        messages=messages,
        tools=[LOOKUP],
        outcome=Outcome(success=success, reward=float(success)),
    ).with_id()


def _stored(tmp_path: Path, *runs: Trajectory) -> Path:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        for run in runs:
            store.add(run)
    return db


def _trajforge(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_an_llm_household_episode_through_the_proxy_is_stored_with_its_tokens(
    smollm_served: str, tmp_path: Path
) -> None:
    from trajforge.proxy import ProxyConfig, ProxyServer
    from trajforge.proxy.session import trajectory_id

    runs_db, calls_db = tmp_path / "runs.db", tmp_path / "proxy.db"
    with ProxyServer(ProxyConfig(upstream=smollm_served), calls_db) as proxy:
        result = _trajforge("rollout", "--env", "household", "--tasks", "1", "--policy", "llm",
                            "--base-url", proxy.session_url("ep"), "--llm-model", SMOLLM2,
                            "--max-steps", "2", "--db", runs_db, "--json")  # fmt: skip
        proxy.flush()
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["episodes"], summary["errors"], summary["model_failures"]) == (1, 0, 0)
    with Store(runs_db) as store:
        [run] = list(store.query())
    assert run.outcome.status != "model_error"
    assert run.outcome.termination_reason in ("agent_stop", "max_steps", "env_done")
    answers = [run.messages[i] for i in run.assistant_indices()]
    for position, message in enumerate(answers):
        errors = message.extra.get(ERRORS_FIELD) or []
        assert all(isinstance(e, str) and e for e in errors)  # each parse failure, named
        assert message.tool_calls or message.text() or errors
        if not message.tool_calls:  # no valid call: the episode ended on that answer
            assert position == len(answers) - 1 and run.outcome.termination_reason == "agent_stop"
    with Store(calls_db) as store:
        recorded = store.get(trajectory_id("ep"))
    assert len(recorded.llm_calls) == len(answers)
    for call in recorded.llm_calls:
        assert call.prompt_token_ids and call.completion_token_ids


def test_the_llm_user_speaks_a_tau_task_turn(smollm_served: str) -> None:
    from trajforge.agents.base import EpisodeState
    from trajforge.agents.user_sim import LLMUser
    from trajforge.envs.tau import TauRetailEnv, bundled_tasks

    task = bundled_tasks("tau-retail")[1]
    user = LLMUser(_model(smollm_served))
    opening = user.opening(task)
    question = Message(role="assistant", content="Can you give me your name and zip code?")
    state = EpisodeState(task=task, messages=[opening, question], tools=[], env=TauRetailEnv(),
                         step=1)  # fmt: skip
    reply = user.reply(state)
    for turn in (opening, reply):
        assert turn.role == "user" and turn.text().strip() and not turn.tool_calls
        assert "<|im_" not in turn.text()  # the template's tokens never leak into the words


def test_diagnose_llm_cites_real_messages_or_counts_its_failure(
    smollm_served: str, tmp_path: Path
) -> None:
    from trajforge.diagnose.storage import load_diagnoses

    failed = _shop_run(7, success=False)
    db = _stored(tmp_path, failed)
    result = _trajforge("diagnose", "--db", db, "--method", "llm", "--base-url", smollm_served,
                        "--llm-model", SMOLLM2, "--json")  # fmt: skip
    if result.exit_code != 0:  # every call failed: a failed command that says why
        assert result.exit_code == 1 and "error:" in result.output
        assert "model call failed" in result.output or "unparseable reply" in result.output
        return
    [summary] = orjson.loads(result.stdout)
    cited = summary["evidence_messages"]
    if summary["decisive_message"] is None:
        assert summary["failure"]  # no diagnosis without its reason
    else:
        assert 0 <= summary["decisive_message"] < len(failed.messages)
        assert all(0 <= index < len(failed.messages) for index in cited)
    with Store(db) as store:
        [stored] = load_diagnoses(store, [failed.id])
    assert stored.step == summary["decisive_message"] and stored.failure() == summary["failure"]


def test_recovers_guidance_writer_writes_guidance_or_says_why_not(
    smollm_served: str,
) -> None:
    from trajforge.generate.guided.guidance import Feedback, LLMGuidanceProposer

    failed = _shop_run(8, success=False)
    feedback = Feedback(reward=0.0, details={"order_cancelled": False})
    asked = LLMGuidanceProposer(_model(smollm_served), max_chars=400).propose(failed, feedback)
    if asked.value is None:
        assert asked.failure and "attempts" in asked.failure
        return
    guidance = asked.value
    assert guidance.text.strip() == guidance.text and guidance.text
    assert (guidance.source, guidance.privileged, guidance.round) == ("llm", False, 1)
    assert "<|im_" not in guidance.text


def test_monitor_judge_scores_runs_or_counts_the_calls_that_failed(
    smollm_served: str, tmp_path: Path
) -> None:
    runs = [_shop_run(1, success=True), _shop_run(2, success=False)]
    db = _stored(tmp_path, *runs)
    result = _trajforge("monitor", "judge", "--step", "1", "--db", db, "--workers", "2",
                        "--base-url", smollm_served, "--llm-model", SMOLLM2, "--json")  # fmt: skip
    if result.exit_code != 0:  # every call failed: a failed command that says why
        assert result.exit_code == 1 and "every call failed" in result.output
        return
    summary = orjson.loads(result.stdout)
    assert summary["runs"] + summary["failed_calls"] == len(runs)
    assert summary["failed_calls"] == len(summary["failures"])
    assert set(summary["risks"]) | set(summary["failures"]) == {r.id for r in runs}
    assert all(0 <= risk <= 1 for risk in summary["risks"].values())

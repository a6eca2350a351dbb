"""Agent and user model calls follow the shared retry policy: retried, then the episode ends
with `model_error` and its reason, and the batch counts it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.agents.llm import LLMPolicy
from trajforge.agents.user_sim import LLMUser
from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv
from trajforge.envs.tau import TauRetailEnv
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.models.scripted import ScriptedModel
from trajforge.rollout.episode import run_episode, start_trajectory

REFUSED = {"status": 400, "error": "bad request"}


def _rollout(db: Path, url: str, exit_code: int = 0) -> dict:
    args = ["rollout", "--env", "household", "--tasks", "1", "--policy", "llm", "--base-url", url]
    args += ["--llm-model", "m", "--max-steps", "2", "--db", str(db), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def test_an_agent_call_failing_every_attempt_ends_the_episode_and_is_counted(
    tmp_path: Path,
) -> None:
    with MockOpenAIServer([REFUSED] * 3) as server:
        summary = _rollout(tmp_path / "r.db", server.base_url, exit_code=1)
        assert len(server.requests) == 3
    assert summary["model_failures"] == 1 and summary["errors"] == 0
    assert summary["termination"] == {"model_error": 1}


def test_a_failed_agent_call_is_retried_and_the_episode_goes_on(tmp_path: Path) -> None:
    with MockOpenAIServer([REFUSED, "I cannot do this."]) as server:
        summary = _rollout(tmp_path / "r.db", server.base_url)
    assert summary["model_failures"] == 0
    assert summary["termination"] == {"agent_stop": 1}


def test_a_user_model_failing_every_attempt_ends_the_episode_with_its_reason() -> None:
    env = TauRetailEnv()
    task = env.tasks()[0]
    with MockOpenAIServer([REFUSED] * 3) as server:
        config = OpenAIModelConfig(base_url=server.base_url, model="user")
        user = LLMUser(OpenAICompatibleModel(config))
        agent = LLMPolicy(ScriptedModel(["How can I help?"]))
        traj = start_trajectory(env, task)
        traj = run_episode(env, agent, task, user=user, trajectory=traj)
    assert traj.outcome.termination_reason == "model_error"
    failure = traj.metadata["model_failure"]
    assert failure.startswith(
        f"user model: model call to {server.base_url}/chat/completions failed"
    )
    assert "after 3 attempts" in failure


def test_an_answer_that_is_not_a_chat_completion_is_a_failed_call() -> None:
    not_json = {"raw": "<html>gateway says hello</html>"}
    no_choices = {"raw": '{"object": "chat.completion", "choices": []}'}
    with MockOpenAIServer([not_json, no_choices, not_json]) as server:
        config = OpenAIModelConfig(base_url=server.base_url, model="m", max_retries=0)
        env = HouseholdEnv()
        policy = LLMPolicy(OpenAICompatibleModel(config))
        traj = run_episode(env, policy, env.tasks(1)[0])
    assert traj.outcome.termination_reason == "model_error"
    failure = traj.metadata["model_failure"]
    assert "answered what is not a chat completion" in failure
    assert "gateway says hello" in failure and "after 3 attempts" in failure

"""The llm policy through the runner, against the mock OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from trajforge.agents import POLICIES, EpisodeState, PolicyStep
from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.episode import Limits
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.schema import Message
from trajforge.store import Store


def _script() -> list:
    task = HouseholdEnv().tasks(1)[0]
    calls = [{"tool_calls": [{"name": a["name"], "arguments": a["arguments"]}]} for a in task.gold]
    return [*calls, "The task is done."]


def _rollout(server: MockOpenAIServer, db: Path, *extra: str):
    args = ["rollout", "--env", "household", "--tasks", "1", "--policy", "llm", "--json"]
    args += ["--base-url", server.base_url, "--llm-model", "mock", "--db", str(db), *extra]
    return CliRunner().invoke(app, args, env={"TRAJFORGE_API_KEY": "secret-key"})


def test_llm_policy_solves_with_scripted_tool_calls_and_records_tokens(tmp_path: Path) -> None:
    with MockOpenAIServer(_script()) as server:
        result = _rollout(server, tmp_path / "llm.db")
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["successes"] == 1 and summary["tokens"] > 0
    assert {t["function"]["name"] for t in requests[0]["tools"]} >= {"go", "take", "put"}
    with Store(tmp_path / "llm.db") as store:
        (traj,) = store.query()
    assert traj.source.model == "llm:mock"
    assert [c.message_index for c in traj.llm_calls] == traj.assistant_indices()
    assert "secret-key" not in traj.model_dump_json()


def test_token_limit_ends_the_episode(tmp_path: Path) -> None:
    with MockOpenAIServer(_script()) as server:
        result = _rollout(server, tmp_path / "tokens.db", "--max-tokens", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["termination"] == {"max_tokens": 1}


class SlowPolicy:
    name = "slow"

    def act(self, state: EpisodeState) -> PolicyStep:
        time.sleep(0.05)
        return PolicyStep(message=Message(role="assistant", tool_calls=[
            state.env.expert_action().model_copy(update={"id": f"c{state.step}"})
        ]))  # fmt: skip


POLICIES.add("slow-expert", SlowPolicy)


def test_wall_time_limit_ends_the_episode(store) -> None:
    config = RolloutConfig(
        env="household",
        tasks=HouseholdEnv().tasks(3)[2:],
        policy="slow-expert",
        limits=Limits(max_wall_s=0.12),
    )
    summary, (traj,) = run_batch(config, store, run_local)
    assert summary.termination == {"max_wall_time": 1}
    assert 1 <= len(traj.assistant_indices()) < len(traj.task.gold)

"""Strategies as guidance: the episode key, the prompt view, and the missing-library error."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from trajforge.agents.llm import STRATEGIES_HEADER, with_strategies
from trajforge.agents.spec import PolicyOptions
from trajforge.cli.main import app
from trajforge.rollout.runner import EpisodeSpec
from trajforge.schema import Message, Task
from trajforge.store import Store


def _key(options: PolicyOptions) -> str:
    return EpisodeSpec(env="household", task=Task(id="t1"), policy="llm", options=options).key()


def test_only_the_episodes_own_strategies_change_its_key():
    plain = _key(PolicyOptions())
    assert _key(PolicyOptions(strategies={"other": ["Open drawers first."]})) == plain
    assert _key(PolicyOptions(strategies={"t1": ["Open drawers first."]})) != plain


def test_the_strategies_go_at_the_end_of_the_system_message():
    messages = [Message(role="system", content="Policy."), Message(role="user", content="Hi")]
    view = with_strategies(messages, ["Do a first.", "Then b."])
    assert view[0].content == f"Policy.\n\n{STRATEGIES_HEADER}\n- Do a first.\n- Then b."
    assert view[1:] == messages[1:] and messages[0].content == "Policy."
    added = with_strategies(messages[1:], ["Do a first."])
    assert added[0].role == "system" and added[1:] == messages[1:]
    assert with_strategies(messages, []) == messages


def test_asking_for_strategies_from_an_empty_library_is_one_error(tmp_path: Path):
    db = tmp_path / "empty.db"
    Store(db).close()
    result = CliRunner().invoke(
        app, ["rollout", "--env", "household", "--tasks", "1", "--strategies", "2", "--db", str(db)]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: the store holds no strategies")


def test_eval_gives_the_llm_policy_the_strategies_retrieved_for_each_world(tmp_path: Path):
    from trajforge.models.mock_server import MockOpenAIServer
    from trajforge.schema import Strategy, StrategyRule, StrategyScope
    from trajforge.strategies import save

    db = tmp_path / "s.db"
    text = "Before you go to a drawer, go to a countertop first."
    with Store(db) as store:
        save(
            store,
            Strategy(
                name="household-d1/go:countertop-before-go:drawer",
                text=text,
                scope=StrategyScope(environment="household", task_features={"difficulty": "1"}),
                rule=StrategyRule(first="go:countertop", then="go:drawer"),
                source="contrast",
            ),
        )
    with MockOpenAIServer(["I am done."]) as server:
        result = CliRunner().invoke(
            app,
            ["eval", "--policy", "llm", "--base-url", server.base_url, "--llm-model", "m",
             "--tasks", "2", "--recovery", "0", "--max-steps", "1", "--strategies", "1",
             "--db", str(db), "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        systems = [r["messages"][0]["content"] for r in server.requests]
    assert systems and all(system.endswith(f"- {text}") for system in systems)

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

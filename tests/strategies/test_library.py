"""The strategy library in a real SQLite store: versions, never overwritten; ls/show."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.schema import Strategy, StrategyRule, StrategyScope
from trajforge.store import Store
from trajforge.strategies.library import UnknownStrategy, latest, resolve, save, versions


def _strategy(text: str = "Call `a` before the first `b`.") -> Strategy:
    return Strategy(
        name="retail/a-before-b",
        text=text,
        scope=StrategyScope(environment="tau-retail", situation="before the first b"),
        rule=StrategyRule(first="a", then="b"),
        source="contrast",
    )


def test_an_edit_is_a_new_version_and_the_old_one_stays(tmp_path: Path):
    with Store(tmp_path / "s.db") as store:
        first = save(store, _strategy())
        assert first is not None and first.version == 1
        assert save(store, _strategy()) is None  # the same content adds nothing
        second = save(store, _strategy("Find the user before changing an order."))
        assert second is not None and second.version == 2
        stored = versions(store, "retail/a-before-b")
        assert [s.version for s in stored] == [1, 2]
        assert stored[0].text == "Call `a` before the first `b`."
        assert [s.version for s in latest(store)] == [2]
        assert latest(store, "household") == []
    rows = sqlite3.connect(tmp_path / "s.db").execute("SELECT COUNT(*) FROM strategies")
    assert rows.fetchone()[0] == 2


def test_a_version_row_cannot_be_written_twice(store: Store):
    from trajforge.store.strategies import StrategyRow, insert_strategy

    row = StrategyRow("x", 1, "household", "contrast", 0.0, b"{}")
    insert_strategy(store, row)
    with pytest.raises(sqlite3.IntegrityError):
        insert_strategy(store, row)


def test_names_resolve_by_unique_prefix(store: Store):
    save(store, _strategy())
    save(store, _strategy().model_copy(update={"name": "retail/a-before-c"}))
    assert resolve(store, "retail/a-before-b") == "retail/a-before-b"
    with pytest.raises(UnknownStrategy, match="names 2 strategies"):
        resolve(store, "retail/")
    with pytest.raises(UnknownStrategy, match="no strategy named"):
        resolve(store, "airline/")


def test_ls_and_show_print_json_and_fail_in_one_line(tmp_path: Path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        save(store, _strategy())
        save(store, _strategy("Find the user first."))
    runner = CliRunner()
    listed = runner.invoke(app, ["strategies", "ls", "--db", str(db), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [(s["name"], s["version"]) for s in json.loads(listed.stdout)] == [
        ("retail/a-before-b", 2)
    ]
    shown = runner.invoke(app, ["strategies", "show", "retail/a", "--db", str(db), "--json"])
    assert [s["text"] for s in json.loads(shown.stdout)] == [
        "Call `a` before the first `b`.",
        "Find the user first.",
    ]
    missing = runner.invoke(app, ["strategies", "show", "nope", "--db", str(db)])
    assert missing.exit_code == 1
    assert missing.stderr.strip().startswith("error: no strategy named 'nope'")

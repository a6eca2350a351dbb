"""`trajforge set` and `import --model` on runs already stored: changed in place, logged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.metadata import metadata_history
from trajforge.store.migrations import MIGRATIONS

RETAIL = "agentrx/tau-retail/tau_dataset_full.json"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), terminal_width=200)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def retail_db(tmp_path: Path, shared_data: Path) -> Path:
    db = tmp_path / "runs.db"
    code, out, err = invoke("import", str(shared_data / RETAIL), "--db", str(db))
    assert code == 0, out + err
    return db


def _rows(db: Path) -> list[tuple]:
    with Store(db) as store:
        return store.db.execute(
            "SELECT rowid, id, model, run, created_at FROM trajectories ORDER BY rowid"
        ).fetchall()


def _log_rows(db: Path) -> int:
    with Store(db) as store:
        return store.db.execute("SELECT COUNT(*) FROM metadata_changes").fetchone()[0]


def test_set_model_and_run_by_filter_is_logged(retail_db: Path) -> None:
    before = _rows(retail_db)
    assert {row[2] for row in before} == {None}  # AgentRx names no model
    args = ["set", "--db", str(retail_db), "--model", "gpt-4o", "--run", "agentrx"]
    code, out, err = invoke(*args, "--env", "tau-retail", "--outcome", "failure", "--by", "ana")
    assert code == 0, out + err
    assert "27 of 27 selected runs changed; 54 changes logged" in out
    assert "model: gpt-4o 27 on 27 runs (was: unknown 27)" in out
    after = _rows(retail_db)
    # same rows, ids, order and creation times; only the failures changed
    assert [(r[0], r[1], r[4]) for r in after] == [(r[0], r[1], r[4]) for r in before]
    with Store(retail_db) as store:
        failures = store.rows(TrajectoryFilter(success=False))
        assert {(r.model, r.run) for r in failures} == {("gpt-4o", "agentrx")}
        assert {r.model for r in store.rows(TrajectoryFilter(success=True))} == {None}
        assert store.count(TrajectoryFilter(model="gpt-4o")) == 27
        run = store.get("74776b59")
        assert (run.source.model, run.source.run, run.id) == ("gpt-4o", "agentrx", after[2][1])
        history = metadata_history(store, run.id)
    assert [(c.field, c.old_value, c.new_value, c.changed_by) for c in history] == [
        ("model", None, "gpt-4o", "ana"),
        ("run", "trial-2", "agentrx", "ana"),
    ]
    assert history[0].command == "trajforge set (environment=tau-retail, success=False)"
    code, out, err = invoke(*args, "--env", "tau-retail", "--outcome", "failure")
    assert code == 0 and "0 of 27 selected runs changed; 0 changes logged" in out
    code, out, _ = invoke("show", "74776b59", "--db", str(retail_db))
    assert "metadata changes" in out and "model unknown -> gpt-4o" in out


def test_labels_are_added_once_and_searchable(retail_db: Path) -> None:
    label = "6:hallucination:says 11 T-shirt options, the tool lists 10"
    args = ["set", "74776b59", "--db", str(retail_db), "--label", label, "--json"]
    code, out, err = invoke(*args)
    assert code == 0, out + err
    report = orjson.loads(out)
    assert (report["selected"], report["changed"]) == (1, 1)
    (change,) = report["changes"]
    assert change["field"] == "labels" and change["old_value"] == []
    assert change["new_value"][0]["message_index"] == 6
    assert orjson.loads(invoke(*args)[1])["changes"] == []  # already there: nothing to do
    with Store(retail_db) as store:
        run = store.get("74776b59")
        assert [(x.message_index, x.category, x.source) for x in run.labels] == [
            (6, "hallucination", "human")
        ]
        (n_labels,) = store.db.execute(
            "SELECT n_labels FROM trajectories WHERE id = ?", (run.id,)
        ).fetchone()
        hits = store.db.execute(
            "SELECT COUNT(*) FROM run_search WHERE run_search MATCH 'hallucination'"
        ).fetchone()[0]
    assert n_labels == 1 and hits == 1


def test_a_bad_change_changes_nothing(retail_db: Path) -> None:
    """Message 40 exists in some failed runs, not in 74776b59 (32 messages): the whole
    selection is refused, and no run or log row is written."""
    before = _rows(retail_db)
    code, _, err = invoke(
        "set", "--db", str(retail_db), "--outcome", "failure", "--model", "m", "--label", "40"
    )
    assert code == 1 and err.startswith("error: trajectory ") and "label at message 40" in err
    assert _rows(retail_db) == before and _log_rows(retail_db) == 0
    code, _, err = invoke("set", "--db", str(retail_db), "--model", "m")
    assert code == 1 and "select the runs to change" in err
    code, _, err = invoke("set", "--db", str(retail_db), "--all")
    assert code == 1 and "nothing to set" in err
    code, _, err = invoke("set", "--db", str(retail_db), "74776b59", "--label", "six")
    assert code == 1 and "--label 'six'" in err


def test_import_with_model_after_the_runs_are_stored(retail_db: Path, shared_data: Path) -> None:
    """The README's order: the shared data first, then the AgentRx file with --model/--run.
    The runs name no model, so they get it (logged); their run name (trial-N) they keep,
    with a warning that names the command to change it. Before, nothing changed and nothing
    was said."""
    path = str(shared_data / RETAIL)
    args = ["import", path, "--db", str(retail_db), "--model", "gpt-4o", "--run", "agentrx"]
    code, out, err = invoke(*args)
    assert code == 0, out + err
    assert "skipped 100 as duplicates" in out
    assert "set --model gpt-4o on 100 runs already stored with no model" in out
    assert err.startswith("warning: 100 runs were already stored with another run name")
    assert "trajforge set --run agentrx " in err
    with Store(retail_db) as store:
        assert {r.model for r in store.rows()} == {"gpt-4o"}
        assert store.get("74776b59").source.run == "trial-2"
        (change,) = metadata_history(store, store.resolve_id("74776b59"))
    assert (change.field, change.old_value, change.new_value) == ("model", None, "gpt-4o")
    assert change.command == "trajforge import --model gpt-4o --run agentrx"
    code, out, err = invoke("import", path, "--db", str(retail_db), "--model", "gpt-4o-mini")
    assert code == 0 and "another model" in err and "trajforge set --model gpt-4o-mini" in err
    with Store(retail_db) as store:
        assert {r.model for r in store.rows()} == {"gpt-4o"}


def test_a_version_8_store_gets_the_log_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:8], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number}")
    db.close()
    with Store(path) as store:
        tables = {name for (name,) in store.db.execute("SELECT name FROM sqlite_master")}
        version = store.db.execute("PRAGMA user_version").fetchone()[0]
    assert "metadata_changes" in tables and version == len(MIGRATIONS)

"""Migration 12: a store whose runs table had columns behind the document is rebuilt with the
document last, keeping every run, rowid, index, trigger and search."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trajforge.demo import sample_dir
from trajforge.importers import import_paths
from trajforge.store import Store, TrajectoryFilter, migrations
from trajforge.store.migrations import MIGRATIONS

SEARCHES = ["flight", '"cancel reservation"', "refund OR exchange", "reserv*"]


def _version_11_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample runs in a store written by trajforge before migration 12."""
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:11])
        with Store(path) as store:
            import_paths(store, [str(sample_dir())])


def _columns(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [row[1] for row in db.execute("PRAGMA table_info(trajectories)")]
    finally:
        db.close()


def _column_info(path: Path) -> dict[str, tuple]:
    """Each column's type, NOT NULL, default and primary key, by name."""
    db = sqlite3.connect(path)
    try:
        return {row[1]: row[2:] for row in db.execute("PRAGMA table_info(trajectories)")}
    finally:
        db.close()


def _schema(store: Store) -> list[tuple[str, str]]:
    """Name and SQL of the runs table's indexes and triggers (the table's own SQL aside)."""
    rows = store.db.execute(
        "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'trajectories' "
        "AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY name"
    )
    return [(name, sql) for name, sql in rows]


def _contents(store: Store) -> dict:
    return {
        "rows": store.rows(),
        "rowids": store.db.execute("SELECT rowid, id FROM trajectories ORDER BY rowid").fetchall(),
        "documents": [traj.model_dump() for traj in store.query()],
        "searches": {q: [r.id for r in store.rows(TrajectoryFilter(text=q))] for q in SEARCHES},
    }


def test_the_runs_table_is_rebuilt_with_the_document_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.db"
    _version_11_store(old, monkeypatch)
    assert _columns(old)[-1] == "termination_reason"  # behind `doc`, as m006 added it
    info = _column_info(old)
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:11])
        with Store(old) as before:
            expected, schema = _contents(before), _schema(before)
    with Store(old) as migrated:
        assert _contents(migrated) == expected
        assert _schema(migrated) == schema
        version = migrated.db.execute("PRAGMA user_version").fetchone()[0]
        assert version == len(MIGRATIONS)
    assert _column_info(old) == info
    assert _columns(old)[-1] == "doc"
    assert len(expected["rows"]) == 34 and all(expected["searches"].values())
    with Store(old) as again:  # the id is still unique: the same runs are duplicates
        report = import_paths(again, [str(sample_dir())])
        assert report.added == 0 and report.duplicates == 34 and again.count() == 34


def test_a_deleted_run_leaves_the_search_after_the_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.db"
    _version_11_store(old, monkeypatch)
    with Store(old) as store:
        found = store.rows(TrajectoryFilter(text="flight"))
        store.delete(found[0].id)
        left = store.db.execute("SELECT count(*) FROM run_search").fetchone()[0]
        assert left == store.count() == 33
        assert [r.id for r in store.rows(TrajectoryFilter(text="flight"))] == [
            r.id for r in found[1:]
        ]


def test_a_big_store_says_it_is_being_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.db"
    _version_11_store(old, monkeypatch)
    capsys.readouterr()
    monkeypatch.setattr(migrations, "REWRITE_NOTICE_BYTES", 0)
    with Store(old):
        pass
    assert "upgrading this store" in capsys.readouterr().err
    with Store(tmp_path / "new.db"):  # a new store has nothing to copy: no notice
        pass
    assert capsys.readouterr().err == ""


OPEN = "import sys\nfrom trajforge.store import Store\nStore(sys.argv[1]).close()\n"


def test_a_rebuild_killed_half_way_leaves_the_store_as_it_was(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while its copy fills the write-ahead log, the migration leaves version 11 with
    every run; the next open rebuilds it, and listings and searches give what they gave."""
    old = tmp_path / "old.db"
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:11])
        with Store(old) as store:
            import_paths(store, [str(shared_data / "tau-bench"), str(shared_data / "tau2-bench")])
            expected = _contents(store)
    wal = old.with_name(old.name + "-wal")
    child = subprocess.Popen([sys.executable, "-c", OPEN, str(old)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while child.poll() is None and time.monotonic() < deadline:
        if wal.exists() and wal.stat().st_size > 2_000_000:  # the copy is under way
            child.kill()
            break
        time.sleep(0.002)
    child.communicate(timeout=60)
    assert child.returncode == -9, "the migration ended before it could be killed"
    db = sqlite3.connect(old)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 11
        assert db.execute("SELECT count(*) FROM trajectories").fetchone()[0] == len(
            expected["rows"]
        )
    finally:
        db.close()
    with Store(old) as migrated:
        assert _contents(migrated) == expected
        assert migrated.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _columns(old)[-1] == "doc"

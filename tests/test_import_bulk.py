"""Bulk imports: files committed in groups, each file all or nothing, and an empty store
filled without the write-ahead log (every page written once)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import trajforge.store.sqlite as sqlite_store
from trajforge.importers import import_paths
from trajforge.schema import Message, Outcome, Task, Trajectory
from trajforge.store import Store


def _run(task_id: str) -> Trajectory:
    return Trajectory(
        task=Task(id=task_id, environment="test-env"),
        messages=[Message(role="user", content=f"do {task_id}")],
        outcome=Outcome(success=True),
    )


def _write_runs(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.jsonl").write_text(_run(name).model_dump_json() + "\n")


def _journal_mode(store: Store) -> str:
    return store.db.execute("PRAGMA journal_mode").fetchone()[0]


@pytest.mark.parametrize("held_back_chars", [1, 1_000_000])
def test_a_bad_file_in_a_group_costs_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held_back_chars: int
) -> None:
    """Also when the held-back index rows are written inside the failing file's savepoint."""
    monkeypatch.setattr(sqlite_store, "PENDING_INDEX_CHARS", held_back_chars)
    _write_runs(tmp_path / "runs", ["a", "b"])
    good = _run("c").model_dump_json()
    (tmp_path / "runs" / "bb.jsonl").write_text(good + "\n{not json\n")
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(tmp_path / "runs")])
        stored = sorted(t.task.id for t in store.query())
        indexed = store.db.execute(
            "SELECT t.task_id FROM run_search AS s JOIN trajectories AS t ON t.rowid = s.rowid "
            "ORDER BY t.task_id"
        ).fetchall()
        orphans = (
            "SELECT count(*) FROM run_search WHERE rowid NOT IN (SELECT rowid FROM trajectories)"
        )
        assert store.db.execute(orphans).fetchone()[0] == 0
    assert stored == ["a", "b"]
    assert indexed == [("a",), ("b",)]  # the failed file's first run left no index row
    assert [Path(f.path).name for f in report.files] == ["a.jsonl", "b.jsonl", "bb.jsonl"]
    assert [bool(f.error) for f in report.files] == [False, False, True]


def test_an_empty_store_is_filled_without_the_log_and_reopens_in_wal(tmp_path: Path) -> None:
    _write_runs(tmp_path / "runs", ["a", "b"])
    modes: list[str] = []
    with Store(tmp_path / "s.db") as store:
        import_paths(
            store, [str(tmp_path / "runs")], on_file=lambda _: modes.append(_journal_mode(store))
        )
        assert modes == ["delete", "delete"]
        assert _journal_mode(store) == "wal"
        _write_runs(tmp_path / "more", ["c"])
        modes.clear()
        import_paths(
            store, [str(tmp_path / "more")], on_file=lambda _: modes.append(_journal_mode(store))
        )
    assert modes == ["wal"]  # not empty any more: the log stays
    with Store(tmp_path / "s.db") as store:
        assert store.count() == 3


def test_the_log_stays_while_another_connection_has_the_store_open(tmp_path: Path) -> None:
    _write_runs(tmp_path / "runs", ["a"])
    modes: list[str] = []
    with Store(tmp_path / "s.db") as store, Store(tmp_path / "s.db") as reader:
        assert reader.count() == 0
        import_paths(
            store, [str(tmp_path / "runs")], on_file=lambda _: modes.append(_journal_mode(store))
        )
        assert reader.count() == 1
    assert modes == ["wal"]


KILLED_MID_TRANSACTION = """
import os, sys
from trajforge.schema import Message, Task, Trajectory
from trajforge.store import Store
store = Store(sys.argv[1])
with store.bulk_writes(), store.transaction():
    for i in range(50):
        message = Message(role="user", content="x" * 5000)
        store.add(Trajectory(task=Task(id=f"t{i}"), messages=[message]))
    os._exit(3)  # killed before the commit: the journal is left behind, hot
"""


def test_a_process_killed_while_filling_an_empty_store_leaves_it_empty(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Store(db).close()
    result = subprocess.run([sys.executable, "-c", KILLED_MID_TRANSACTION, str(db)], timeout=120)
    assert result.returncode == 3
    assert (tmp_path / "s.db-journal").exists()
    with Store(db) as store:
        assert store.count() == 0
        assert _journal_mode(store) == "wal"
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert sqlite3.connect(db).execute("SELECT count(*) FROM run_search").fetchone()[0] == 0


def test_a_run_replaced_or_deleted_in_a_bulk_transaction_leaves_one_index_row(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db") as store:
        store.add(_run("z"))  # so that the replaced run is not the last row
        with store.bulk_writes(), store.transaction():
            first, gone = _run("a"), _run("b")
            store.add(first)
            store.add(gone)
            store.add(_run("c"))
            store.put(first.model_copy(update={"messages": [*first.messages, *first.messages]}))
            store.delete(gone.id)
        rows = store.db.execute(
            "SELECT s.rowid, t.task_id FROM run_search AS s "
            "LEFT JOIN trajectories AS t ON t.rowid = s.rowid ORDER BY t.task_id"
        ).fetchall()
    assert [task for _, task in rows] == ["a", "c", "z"]  # no row without its run


def test_a_rolled_back_savepoint_drops_its_rows_after_an_earlier_run_was_replaced(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db") as store:
        with store.bulk_writes(), store.transaction():
            first = _run("a")
            store.add(first)  # held back by an earlier file
            with pytest.raises(RuntimeError), store.savepoint():
                store.put(first.model_copy(update={"messages": first.messages * 2}))
                store.add(_run("b"))
                raise RuntimeError("this file fails")
            store.add(_run("c"))
        rows = store.db.execute(
            "SELECT t.task_id FROM run_search AS s "
            "LEFT JOIN trajectories AS t ON t.rowid = s.rowid ORDER BY t.task_id"
        ).fetchall()
    assert [task for (task,) in rows] == ["a", "c"]  # no row without its run, none lost

"""Migration 7: the store writes each run's full-text row itself, the same text the triggers
of migration 5 extracted from the stored JSON."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trajforge.demo import sample_dir
from trajforge.importers import import_paths
from trajforge.store import Store
from trajforge.store.migrations import _RUN_TEXT, MIGRATIONS

REAL_SAMPLES = [
    "who-and-when/Algorithm-Generated",
    "tau2-bench/toolorchestra_gpt-5",
    "agentrx",
]


def _lines(text: str | None) -> list[str]:
    return [line for line in (text or "").split("\n") if line]


def _indexed(store: Store) -> dict[str, str]:
    rows = store.db.execute(
        "SELECT t.id, s.body FROM trajectories AS t JOIN run_search AS s ON s.rowid = t.rowid"
    )
    return dict(rows.fetchall())


def test_index_holds_what_the_json_extraction_gave(tmp_path: Path, shared_data: Path) -> None:
    with Store(tmp_path / "real.db") as store:
        paths = [str(shared_data / name) for name in REAL_SAMPLES] + [str(sample_dir())]
        import_paths(store, paths)
        extracted = _RUN_TEXT.format(doc="CAST(doc AS TEXT)")
        expected = dict(store.db.execute(f"SELECT id, ({extracted}) FROM trajectories").fetchall())
        indexed = _indexed(store)
    assert len(indexed) == len(expected) > 150
    differing = [i for i in expected if _lines(indexed[i]) != _lines(expected[i])]
    assert differing == []


def test_rewrites_and_deletes_leave_one_row_per_run(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        import_paths(store, [str(sample_dir())])
        traj = next(store.query())
        for word in ("firstmarker", "secondmarker"):
            traj.messages[0].content = word
            store.put(traj)
        store.delete(next(t.id for t in store.query() if t.id != traj.id))
        (orphans,) = store.db.execute(
            "SELECT count(*) FROM run_search WHERE rowid NOT IN (SELECT rowid FROM trajectories)"
        ).fetchone()
        hits = store.db.execute(
            "SELECT body FROM run_search WHERE run_search MATCH 'firstmarker OR secondmarker'"
        ).fetchall()
        assert orphans == 0
        assert len(hits) == 1 and "secondmarker" in hits[0][0]
        assert len(_indexed(store)) == store.count()


def test_a_store_with_the_old_triggers_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:6], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number}")
    db.close()
    with Store(path) as store:
        import_paths(store, [str(sample_dir())])
        triggers = store.db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert {name for (name,) in triggers} == {"run_search_delete"} | {
            f"diagnosis_search_{event}" for event in ("insert", "update", "delete")
        }
        assert len(_indexed(store)) == store.count() > 0

"""Training progress in the store: runs, iteration rows, rewrites, and what a watcher sees."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from trajforge.errors import UserError
from trajforge.store import Store
from trajforge.store.migrations import MIGRATIONS, m008_training_progress
from trajforge.store.training import (
    iteration_changes_since,
    latest_iteration_seq,
    put_training_iteration,
    put_training_run,
    training_iterations,
    training_run,
    training_runs,
)


def _row(iteration: int, reward: float) -> bytes:
    return orjson.dumps({"iteration": iteration, "reward": reward, "correlation": 1.0})


def test_iteration_rows_round_trip_in_order(store: Store) -> None:
    settings = orjson.dumps({"base": "sft", "config": {"iterations": 3}})
    put_training_run(store, "runs/a", "rl", settings)
    start = latest_iteration_seq(store)
    for iteration, reward in [(2, 0.5), (1, 0.25)]:
        put_training_iteration(store, "runs/a", iteration, _row(iteration, reward))
    rows = training_iterations(store, "runs/a")
    assert [r.iteration for r in rows] == [1, 2]
    assert [orjson.loads(r.doc)["reward"] for r in rows] == [0.25, 0.5]
    run = training_run(store, "runs/a")
    assert run is not None and (run.kind, run.doc, run.iterations) == ("rl", settings, 2)
    assert run.last_written == max(r.written_at for r in rows)
    assert [c.iteration for c in iteration_changes_since(store, start)] == [2, 1]


def test_a_rewritten_iteration_replaces_its_row_and_is_seen_again(store: Store) -> None:
    put_training_run(store, "a", "rl", b"{}")
    first = put_training_iteration(store, "a", 1, _row(1, 0.0))
    put_training_iteration(store, "a", 2, _row(2, 0.0))
    again = put_training_iteration(store, "a", 1, _row(1, 1.0))
    assert again > first and latest_iteration_seq(store) == again
    assert [orjson.loads(r.doc)["reward"] for r in training_iterations(store, "a")] == [1.0, 0.0]
    changes = iteration_changes_since(store, first)
    assert [(c.run, c.iteration) for c in changes] == [("a", 2), ("a", 1)]


def test_runs_are_listed_newest_first_and_rows_need_a_registered_run(store: Store) -> None:
    put_training_run(store, "old", "rl", b"{}")
    put_training_run(store, "new", "rl", b"{}")
    put_training_run(store, "old", "rl", b'{"updated": true}')  # keeps its start
    assert [r.name for r in training_runs(store)] == ["new", "old"]
    assert training_runs(store)[1].doc == b'{"updated": true}'
    assert training_run(store, "missing") is None and training_iterations(store, "missing") == []
    with pytest.raises(UserError, match="no training run 'missing'"):
        put_training_iteration(store, "missing", 1, _row(1, 0.0))
    assert latest_iteration_seq(store) == 0


def test_a_store_from_before_the_migration_gains_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = MIGRATIONS.index(m008_training_progress)
    db = sqlite3.connect(path, isolation_level=None)
    for migration in MIGRATIONS[:before]:
        migration(db)
    db.execute(f"PRAGMA user_version = {before}")
    db.close()
    with Store(path) as migrated:
        assert training_runs(migrated) == []
        put_training_run(migrated, "r", "rl", b"{}")
        assert put_training_iteration(migrated, "r", 1, _row(1, 0.0)) == 1

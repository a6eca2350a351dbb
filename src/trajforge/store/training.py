"""The `training_runs` and `training_iterations` tables: a training loop's progress, row by row.

A loop registers its run once (a name, a kind such as `rl`, and a JSON document of its
settings) and writes one JSON row per iteration as it finishes; writing an iteration again
(a resumed run) replaces it. The store knows the columns, not what the documents hold: the
loop (`trajforge.train.rl.progress`) writes them and the UI reads them.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from trajforge.errors import UserError
from trajforge.store.sqlite import Store


class TrainingRun(NamedTuple):
    name: str
    kind: str
    started_at: float
    doc: bytes
    iterations: int
    """Iteration rows written so far."""
    last_written: float | None
    """When the newest iteration row was written (None before the first)."""


class TrainingIteration(NamedTuple):
    seq: int
    """Grows with every write; `iteration_changes_since` starts after one."""
    run: str
    iteration: int
    written_at: float
    doc: bytes


_RUNS = (
    "SELECT r.name, r.kind, r.started_at, r.doc, count(i.seq), max(i.written_at) "
    "FROM training_runs r LEFT JOIN training_iterations i ON i.run = r.name"
)
_ITERATIONS = "SELECT seq, run, iteration, written_at, doc FROM training_iterations"


def put_training_run(store: Store, name: str, kind: str, doc: bytes) -> None:
    """Register a run, or update the kind and document of a known one (its start stays)."""
    with store.transaction():
        store.db.execute(
            "INSERT INTO training_runs (name, kind, started_at, doc) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, doc = excluded.doc",
            (name, kind, time.time(), doc),
        )


def put_training_iteration(store: Store, run: str, iteration: int, doc: bytes) -> int:
    """Write (or rewrite) one iteration's row of a registered run; returns its `seq`."""
    with store.transaction():
        known = store.db.execute("SELECT 1 FROM training_runs WHERE name = ?", (run,)).fetchone()
        if known is None:
            raise UserError(f"{store.path}: no training run {run!r} to add iteration {iteration}")
        cursor = store.db.execute(
            "INSERT OR REPLACE INTO training_iterations (run, iteration, written_at, doc) "
            "VALUES (?, ?, ?, ?)",
            (run, iteration, time.time(), doc),
        )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def training_runs(store: Store) -> list[TrainingRun]:
    """Every registered run, the most recently started first."""
    rows = store.db.execute(f"{_RUNS} GROUP BY r.name ORDER BY r.started_at DESC, r.name")
    return [_run(row) for row in rows]


def training_run(store: Store, name: str) -> TrainingRun | None:
    row = store.db.execute(f"{_RUNS} WHERE r.name = ? GROUP BY r.name", (name,)).fetchone()
    return _run(row) if row is not None else None


def training_iterations(store: Store, run: str) -> list[TrainingIteration]:
    """A run's iteration rows, in iteration order."""
    rows = store.db.execute(f"{_ITERATIONS} WHERE run = ? ORDER BY iteration", (run,))
    return [_iteration(row) for row in rows]


def iteration_changes_since(store: Store, seq: int) -> list[TrainingIteration]:
    """Iteration rows written after `seq`, in the order they were written."""
    rows = store.db.execute(f"{_ITERATIONS} WHERE seq > ? ORDER BY seq", (seq,))
    return [_iteration(row) for row in rows]


def latest_iteration_seq(store: Store) -> int:
    """Where `iteration_changes_since` starts for a new watcher."""
    row = store.db.execute("SELECT coalesce(max(seq), 0) FROM training_iterations").fetchone()
    return int(row[0])


def _run(row: tuple) -> TrainingRun:
    name, kind, started_at, doc, count, last = row
    return TrainingRun(name, kind, started_at, bytes(doc), int(count), last)


def _iteration(row: tuple) -> TrainingIteration:
    seq, run, iteration, written_at, doc = row
    return TrainingIteration(seq, run, iteration, written_at, bytes(doc))

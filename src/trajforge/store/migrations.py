"""Numbered schema migrations of the SQLite store.

Each migration is a small function that takes a connection; `PRAGMA user_version` records how
many have run. Add a migration by appending a function to `MIGRATIONS`; never edit one that
has shipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def m001_trajectories(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE trajectories (
            id TEXT PRIMARY KEY,
            format_version INTEGER NOT NULL,
            harness TEXT,
            model TEXT,
            run TEXT,
            environment TEXT,
            task_id TEXT,
            success INTEGER,
            reward REAL,
            n_messages INTEGER NOT NULL,
            n_steps INTEGER NOT NULL,
            total_tokens INTEGER,
            parent_id TEXT,
            fork_index INTEGER,
            format TEXT,
            source_file TEXT,
            created_at REAL NOT NULL,
            doc BLOB NOT NULL
        )
        """
    )
    for column in ("harness", "model", "environment", "task_id", "success", "parent_id"):
        db.execute(f"CREATE INDEX idx_trajectories_{column} ON trajectories({column})")


def m002_diagnoses(db: sqlite3.Connection) -> None:
    """Error-to-training diagnoses: one per (trajectory, method)."""
    db.execute(
        """
        CREATE TABLE diagnoses (
            id TEXT PRIMARY KEY,
            trajectory_id TEXT NOT NULL,
            method TEXT NOT NULL,
            step INTEGER,
            agent TEXT,
            category TEXT,
            verified INTEGER NOT NULL,
            created_at REAL NOT NULL,
            doc BLOB NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_diagnoses_trajectory ON diagnoses(trajectory_id)")


def m003_proxy_calls(db: sqlite3.Connection) -> None:
    """Model calls recorded by the proxy: one row per call, in session order."""
    db.execute(
        """
        CREATE TABLE proxy_calls (
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            trajectory_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            status INTEGER,
            error TEXT,
            started_at REAL NOT NULL,
            latency_s REAL,
            doc BLOB NOT NULL,
            PRIMARY KEY (session, seq)
        )
        """
    )
    db.execute("CREATE INDEX idx_proxy_calls_trajectory ON proxy_calls(trajectory_id)")


def m004_summary_columns_and_filter_indexes(db: sqlite3.Connection) -> None:
    """Token and annotation counts as columns (analytics export reads them without parsing
    documents), and indexes that serve the CLI's combined filters in insertion order."""
    for column in ("prompt_tokens", "completion_tokens", "n_labels", "n_faults"):
        db.execute(f"ALTER TABLE trajectories ADD COLUMN {column} INTEGER")
    db.execute(
        """
        UPDATE trajectories SET
            prompt_tokens = json_extract(CAST(doc AS TEXT), '$.usage.prompt_tokens'),
            completion_tokens = json_extract(CAST(doc AS TEXT), '$.usage.completion_tokens'),
            n_labels = json_array_length(CAST(doc AS TEXT), '$.labels'),
            n_faults = json_array_length(CAST(doc AS TEXT), '$.faults')
        """
    )
    for columns in (("environment", "success"), ("harness", "success"), ("task_id", "success")):
        name = "_".join(columns)
        db.execute(f"CREATE INDEX idx_trajectories_{name} ON trajectories({', '.join(columns)})")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    m001_trajectories,
    m002_diagnoses,
    m003_proxy_calls,
    m004_summary_columns_and_filter_indexes,
]


def migrate(db: sqlite3.Connection) -> int:
    """Run the migrations not yet applied; returns the schema version reached.

    All pending migrations and the version bump commit in one `BEGIN IMMEDIATE`
    transaction, and the version is read again once the write lock is held: a process
    killed half-way leaves the store as it was, and of two processes creating the same
    new store at once the second finds the first one's work done. `db` must be in
    autocommit mode (`isolation_level=None`).
    """
    if _version(db) == len(MIGRATIONS):
        return len(MIGRATIONS)
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _version(db)
        for migration in MIGRATIONS[version:]:
            migration(db)
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return len(MIGRATIONS)


def _version(db: sqlite3.Connection) -> int:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        from trajforge.errors import UserError

        raise UserError(
            f"this store has schema version {version}, newer than this trajforge "
            f"({len(MIGRATIONS)}); upgrade trajforge"
        )
    return version

"""Migration 4: summary columns filled from existing documents; indexes for combined filters."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from trajforge.demo import sample_dir
from trajforge.importers import import_paths
from trajforge.store import Store, TrajectoryFilter, encode
from trajforge.store.migrations import MIGRATIONS

OLD_COLUMNS = 16  # indexed values a row had before migration 4


def _version_3_store(path: Path, source: Store) -> None:
    """A store as trajforge wrote it before migration 4, holding `source`'s trajectories."""
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:3], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number}")
    for traj in source.query():
        row, document, _ = encode(traj)
        values = (*row[:OLD_COLUMNS], time.time(), document)
        db.execute(f"INSERT INTO trajectories VALUES ({', '.join('?' * len(values))})", values)
    db.close()


def test_migration_fills_summary_columns_from_documents(tmp_path: Path) -> None:
    with Store(tmp_path / "new.db") as new:
        import_paths(new, [str(sample_dir())])
        _version_3_store(tmp_path / "old.db", new)
        columns = ["id", "prompt_tokens", "completion_tokens", "n_labels", "n_faults"]
        expected = sorted(row for batch in new.column_batches(columns) for row in batch)
    with Store(tmp_path / "old.db") as migrated:
        got = sorted(row for batch in migrated.column_batches(columns) for row in batch)
    assert got == expected and len(got) == 34
    assert any(row[3] for row in got) and any(row[1] is not None for row in got)


def test_combined_filters_use_a_combined_index(store: Store) -> None:
    filters = {
        "environment": TrajectoryFilter(environment="tau-retail", success=False),
        "harness": TrajectoryFilter(harness="tau-bench", success=True),
        "task_id": TrajectoryFilter(task_id="7", success=False),
    }
    for column, flt in filters.items():
        plan = " ".join(store.query_plan(flt))
        assert f"idx_trajectories_{column}_success" in plan, plan

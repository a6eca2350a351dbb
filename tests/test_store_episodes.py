"""Migration 6: a rollout's episode key, environment and ending as indexed columns."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from trajforge.demo import sample_dir
from trajforge.importers import import_paths
from trajforge.schema import Trajectory
from trajforge.store import Store, encode
from trajforge.store.migrations import MIGRATIONS


def _rollout(traj: Trajectory, key: str, env: str) -> Trajectory:
    traj = traj.model_copy(deep=True)
    traj.id = ""
    traj.source.harness = "rollout-harness"
    traj.metadata = {**traj.metadata, "episode_key": key, "env": env}
    return traj


def _version_5_store(path: Path, trajs: list[Trajectory]) -> None:
    """A store as trajforge wrote it before migration 6."""
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:5], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number}")
    for traj in trajs:
        row, document, _ = encode(traj)
        values = (*row[:16], time.time(), document, *row[16:20])
        db.execute(f"INSERT INTO trajectories VALUES ({', '.join('?' * len(values))})", values)
    db.close()


def test_episodes_of_old_and_new_rows(tmp_path: Path) -> None:
    with Store(tmp_path / "sample.db") as sample:
        import_paths(sample, [str(sample_dir())])
        first, second = list(sample.query())[:2]
    old = [_rollout(first, "k1", "household"), _rollout(second, "k2", "tau-retail")]
    _version_5_store(tmp_path / "old.db", old)
    with Store(tmp_path / "old.db") as store:
        store.add(_rollout(second, "k3", "household"))
        found = store.episodes("rollout-harness", "household")
        plan = " ".join(
            row[-1]
            for row in store.db.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM trajectories "
                "WHERE harness = ? AND episode_env = ? AND episode_key IS NOT NULL",
                ("rollout-harness", "household"),
            )
        )
    assert sorted(found) == ["k1", "k3"]
    assert found["k1"] == (old[0].id, first.outcome.termination_reason)
    assert "idx_trajectories_episode" in plan

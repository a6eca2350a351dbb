"""Real runs for the monitor tests: imported once per session, featurized once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.importers import import_paths
from trajforge.monitor import RunFeatures, featurize_runs
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

SOURCES = {
    "mini-swe-agent": "swe-bench-verified",
    "tau-bench": "tau-bench/historical_trajectories",
    "agentrx": "agentrx/tau-retail/tau_dataset_full.json",
}


@pytest.fixture(scope="session")
def monitor_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("monitor") / "runs.db"
    with Store(path) as store:
        for relative in SOURCES.values():
            report = import_paths(store, [str(shared_data / relative)])
            assert not report.failed, report.failed
    return path


def _query(db: Path, harness: str) -> list[Trajectory]:
    with Store(db) as store:
        return list(store.query(TrajectoryFilter(harness=harness)))


@pytest.fixture(scope="session")
def swe_trajs(monitor_db: Path) -> list[Trajectory]:
    return _query(monitor_db, "mini-swe-agent")


@pytest.fixture(scope="session")
def tau_trajs(monitor_db: Path) -> list[Trajectory]:
    return _query(monitor_db, "tau-bench")


@pytest.fixture(scope="session")
def swe_runs(swe_trajs: list[Trajectory]) -> list[RunFeatures]:
    return featurize_runs(swe_trajs)


@pytest.fixture(scope="session")
def tau_runs(tau_trajs: list[Trajectory]) -> list[RunFeatures]:
    return featurize_runs(tau_trajs)

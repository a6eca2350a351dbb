"""Real runs for the diagnosis tests (read from ../shared/data, never written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.importers.who_and_when import WhoAndWhenImporter
from trajforge.schema import Trajectory

AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"
RETAIL = "agentrx/tau-retail/tau_dataset_full.json"
WHO_AND_WHEN = "who-and-when/Algorithm-Generated"


def _read_tau(path: Path) -> list[Trajectory]:
    return [t.with_id() for t in TauBenchImporter().read(path)]


@pytest.fixture(scope="session")
def airline_runs(shared_data: Path) -> list[Trajectory]:
    return _read_tau(shared_data / AIRLINE)


@pytest.fixture(scope="session")
def retail_runs(shared_data: Path) -> list[Trajectory]:
    return _read_tau(shared_data / RETAIL)


@pytest.fixture(scope="session")
def who_and_when_runs(shared_data: Path) -> list[Trajectory]:
    files = sorted((shared_data / WHO_AND_WHEN).glob("*.json"), key=lambda p: int(p.stem))
    importer = WhoAndWhenImporter()
    return [t.with_id() for path in files for t in importer.read(path)]


def pick(runs: list[Trajectory], task_id: str, trial: int = 0) -> Trajectory:
    """A fresh copy of the run of `task_id` / trial (tests may change it)."""
    for traj in runs:
        if traj.task.id == task_id and traj.source.run == f"trial-{trial}":
            return traj.model_copy(deep=True)
    raise LookupError(f"no run of task {task_id} trial {trial}")

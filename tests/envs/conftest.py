"""Fixtures of the tau environment tests: the 300 real tau-bench runs as trajectories."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.schema import Trajectory

TAU_RUN_FILES = (
    "tau-bench/historical_trajectories/gpt-4o-airline.json",
    "agentrx/tau-retail/tau_dataset_full.json",
)


def load_tau_runs(shared_data: Path) -> list[Trajectory]:
    importer = TauBenchImporter()
    runs = []
    for name in TAU_RUN_FILES:
        runs.extend(t.with_id() for t in importer.read(shared_data / name))
    return runs


@pytest.fixture(scope="session")
def tau_runs(shared_data: Path) -> list[Trajectory]:
    return load_tau_runs(shared_data)

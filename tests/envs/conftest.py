"""Fixtures of the environment tests: the 300 real tau-bench runs as trajectories, and one
swe-bench build cache for the tests of real SWE-bench instances."""

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


@pytest.fixture(scope="session")
def swe_bench_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build cache that starts empty: the first test that needs psf/requests 6028's
    environment builds it from PyPI, the later ones reuse it."""
    from trajforge.envs.swe_bench.build import pyenv_python
    from trajforge.envs.swe_bench.cache import cache_dir

    pyenv_python("3.9")  # a clear error when the Python is missing
    return cache_dir(tmp_path_factory.mktemp("swe-bench-cache"))

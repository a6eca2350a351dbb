"""Shared fixtures: paths to the real recorded data and fresh stores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trajforge.store import Store

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"

# Progress lines are time-based: a command that happens to run past the interval on a busy
# machine would add lines to the output a test reads. Tests that check progress lines set
# the interval themselves (TRAJFORGE_PROGRESS_EVERY=0).
os.environ.setdefault("TRAJFORGE_PROGRESS_EVERY", "3600")


def shared_data_dir() -> Path:
    """`../shared/data` beside the checkout (override with $TRAJFORGE_SHARED_DATA)."""
    return Path(os.environ.get("TRAJFORGE_SHARED_DATA") or REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.exists():
        pytest.fail(f"real data not found at {path}; set TRAJFORGE_SHARED_DATA")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "test.db") as opened:
        yield opened


TAU2_RUN_FILES = (
    "tau2-bench/toolorchestra_gpt-5/toolorchestra_airline_gpt-5_1trial.json",
    "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json",
)


@pytest.fixture(scope="session")
def tau2_runs(shared_data: Path) -> list:
    """The 164 real tau2-bench simulations (toolorchestra, gpt-5)."""
    from trajforge.importers.tau2_bench import Tau2BenchImporter

    importer = Tau2BenchImporter()
    return [t.with_id() for name in TAU2_RUN_FILES for t in importer.read(shared_data / name)]

"""Shared fixtures: paths to the real recorded data and fresh stores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trajforge.store import Store

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"


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

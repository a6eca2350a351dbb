from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.schema import Trajectory

AGENTRX = "agentrx/tau-retail/tau_dataset_full.json"


@pytest.fixture(scope="session")
def retail_runs(shared_data: Path) -> list[Trajectory]:
    """The 100 real tau-bench retail runs of AgentRx (73 successes)."""
    return [t.with_id() for t in TauBenchImporter().read(shared_data / AGENTRX)]

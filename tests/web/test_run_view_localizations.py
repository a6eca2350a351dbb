"""The run view names the point of no return and the first deviation of a real failure."""

from __future__ import annotations

from pathlib import Path

from trajforge.diagnose.counterfactual import CounterfactualLocalizer
from trajforge.diagnose.run import diagnose_run
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.web.run_view import run_view

RETAIL = "agentrx/tau-retail/tau_dataset_full.json"


def test_run_view_shows_both_localizations(shared_data: Path) -> None:
    runs = TauBenchImporter().read(shared_data / RETAIL)
    run = next(t.with_id() for t in runs if t.with_id().id.startswith("74776b59"))
    diagnosis = diagnose_run(run, CounterfactualLocalizer())
    page = run_view(run, [diagnosis], {}, 0)
    assert 'point of no return: <a href="#m-30">message 30</a>' in page
    assert 'first deviation: <a href="#m-6">message 6</a>, wrong_statement' in page
    assert "correction there: <code>Currently, there are 10 available" in page
    assert "It does not say the decisive message is the run&#x27;s first mistake" in page

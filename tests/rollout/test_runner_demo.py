"""The demo step runs its batches into the demo store and leaves the robustness reports."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from trajforge.demo import DemoContext, sample_dir
from trajforge.demo.rollout import CONDITIONS, demo_step


def test_demo_step_runs_batches_and_the_robustness_table(store, tmp_path: Path) -> None:
    console = Console(record=True, width=140)
    ctx = DemoContext(store=store, out_dir=tmp_path, console=console, sample_dir=sample_dir())
    demo_step(ctx)
    household = ctx.results["rollout:household"]
    assert household.episodes == 8 and household.faults_injected > 0
    reports = ctx.results["robustness"]
    assert [r.condition for r in reports] == ["none", *CONDITIONS]
    assert all(r.episodes == 12 for r in reports)
    assert "fault robustness" in console.export_text()

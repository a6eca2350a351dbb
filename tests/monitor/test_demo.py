"""The monitor's demo step runs on the bundled sample and leaves a loadable model file."""

from __future__ import annotations

from rich.console import Console

from trajforge.demo import DemoContext, sample_dir
from trajforge.demo.monitor import demo_step
from trajforge.importers import import_paths
from trajforge.monitor import load_detector


def test_demo_step_trains_and_scores_on_the_sample(store, tmp_path):
    import_paths(store, [str(sample_dir())])
    console = Console(record=True, width=100)
    ctx = DemoContext(store=store, out_dir=tmp_path, console=console, sample_dir=sample_dir())
    demo_step(ctx)
    assert load_detector(ctx.results["monitor"]["model"]).thresholds
    assert "failure risk of failed run" in console.export_text()

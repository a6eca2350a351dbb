"""`make demo` (python -m trajforge.demo): the bundled sample into a fresh store, then stats."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from trajforge import demo


def quiet_console() -> Console:
    return Console(file=io.StringIO(), width=120)


FOUNDATION_STEPS = [
    ("Import the bundled real trajectories", demo.import_sample),
    ("Stats report", demo.show_stats),
]


def test_demo_starts_with_import_and_stats() -> None:
    assert demo.STEPS[:2] == FOUNDATION_STEPS


def test_demo_imports_sample_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "STEPS", FOUNDATION_STEPS)
    console = quiet_console()
    ctx = demo.run(tmp_path, console)
    assert ctx.results["import"].failed == []
    stats = ctx.results["stats"]
    assert (stats["total"], stats["successes"]) == (34, 15)
    text = console.file.getvalue()
    assert "1. Import the bundled real trajectories" in text and "by environment" in text
    assert text.rstrip().endswith(f"trajforge ui --db {tmp_path / 'trajforge.db'}")
    again = demo.run(tmp_path, quiet_console())
    assert again.results["stats"]["total"] == 34, "each run starts from a fresh store"


def record_store_size(ctx: demo.DemoContext) -> None:
    ctx.results["size"] = ctx.store.count()


def test_a_step_is_one_line_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [*FOUNDATION_STEPS, ("Count", "test_cli_demo:record_store_size")]
    monkeypatch.setattr(demo, "STEPS", steps)
    ctx = demo.run(tmp_path, quiet_console())
    assert ctx.results["size"] == 34

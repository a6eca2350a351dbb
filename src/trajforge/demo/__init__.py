"""`make demo`: trajforge end to end on the bundled sample of real runs.

The demo is an ordered list of named steps. Each step is a function taking a `DemoContext`
(the store, the output folder, the console, the sample folder, and `results` that steps
leave for later steps). Add a step with one line in `STEPS`: a `(title, function)` pair, or
`(title, "package.module:function")` to avoid an import here.

Run: `python -m trajforge.demo [OUT_DIR]` (default `./demo-out`); the store is rebuilt
from scratch in `OUT_DIR/trajforge.db` on every run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console

from trajforge.errors import UserError
from trajforge.registry import Registry
from trajforge.store import Store

DEFAULT_OUT = Path("demo-out")


@dataclass
class DemoContext:
    """What demo steps share."""

    store: Store
    """The demo's fresh store (`out_dir/trajforge.db`)."""
    out_dir: Path
    """Folder for anything a step writes (exports, reports)."""
    console: Console
    """Where steps print."""
    sample_dir: Path
    """The bundled sample of real runs (layout of ../shared/data; see its NOTICE.md)."""
    results: dict[str, Any] = field(default_factory=dict)
    """Values a step leaves for later steps, by step-chosen keys."""


DemoStep = Callable[[DemoContext], None]


def sample_dir() -> Path:
    """The bundled sample of real trajectories shipped as package data."""
    return Path(str(resources.files("trajforge") / "data" / "sample"))


def import_sample(ctx: DemoContext) -> None:
    """Import every run of the bundled sample (formats are detected)."""
    from trajforge.cli.importing import print_import_report
    from trajforge.importers import import_paths

    report = import_paths(ctx.store, [str(ctx.sample_dir)])
    print_import_report(report, out=ctx.console)
    ctx.results["import"] = report


def show_stats(ctx: DemoContext) -> None:
    """The stats report: counts and success rates by source, model, environment."""
    from trajforge.cli.report import print_stats
    from trajforge.store.stats import compute_stats

    report = compute_stats(ctx.store)
    print_stats(report, ctx.console)
    ctx.results["stats"] = report


STEPS: list[tuple[str, DemoStep | str]] = [
    ("Import the bundled real trajectories", import_sample),
    ("Stats report", show_stats),
    ("Error-to-training: diagnose failures, write views", "trajforge.demo.diagnose:demo_step"),
    ("Rollouts with unreliable tools, and robustness", "trajforge.demo.rollout:demo_step"),
    ("Replay stored runs, fork a failed tau run, hand off", "trajforge.demo.tau:demo_step"),
    ("Early failure detection: train a monitor, score a run", "trajforge.demo.monitor:demo_step"),
]

_STEP_PATHS: Registry[DemoStep] = Registry("demo step")


def resolve(step: DemoStep | str) -> DemoStep:
    """A step function, loading `package.module:function` paths."""
    return _STEP_PATHS.get(step) if isinstance(step, str) else step


def run(out_dir: Path = DEFAULT_OUT, console: Console | None = None) -> DemoContext:
    """Run every step in order on a fresh store in `out_dir`; returns the context."""
    console = console or Console()
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "trajforge.db"
    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    with Store(db) as store:
        ctx = DemoContext(store=store, out_dir=out_dir, console=console, sample_dir=sample_dir())
        for number, (title, step) in enumerate(STEPS, start=1):
            console.rule(f"[bold]{number}. {title}")
            resolve(step)(ctx)
    console.print(f"\nstore: {db} — explore it with `trajforge ls --db {db}`")
    console.print(f"open it in the browser: {ui_command(ctx)}", markup=False, soft_wrap=True)
    return ctx


def ui_command(ctx: DemoContext) -> str:
    """The command that serves the web UI on the demo store (with the demo's monitor model
    when its step made one)."""
    command = f"trajforge ui --db {ctx.out_dir / 'trajforge.db'}"
    model = (ctx.results.get("monitor") or {}).get("model")
    return command + (f" --monitor {model}" if model else "")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        run(Path(args[0]) if args else DEFAULT_OUT)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

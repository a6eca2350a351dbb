"""Demo step: train the failure monitor on the bundled sample and print one run's risk curve.

The sample is tiny (a few SWE-bench and tau-bench runs), so the model here only shows the
mechanics; the cross-validated figures come from `trajforge monitor eval` on the full data.
"""

from __future__ import annotations

from rich.table import Table

from trajforge.monitor.dataset import featurize_runs
from trajforge.monitor.detectors import LearnedConfig, LearnedDetector
from trajforge.monitor.modelfile import save_detector
from trajforge.monitor.scoring import risk_curve
from trajforge.store import TrajectoryFilter

HARNESSES = ("mini-swe-agent", "tau-bench")


def demo_step(ctx) -> None:
    trajs = [t for h in HARNESSES for t in ctx.store.query(TrajectoryFilter(harness=h))]
    runs = featurize_runs(trajs)
    detector = LearnedDetector(LearnedConfig(inner_folds=2))
    detector.fit(runs)
    path = ctx.out_dir / "monitor.model"
    save_detector(detector, path, {"runs": len(runs)})
    ctx.console.print(
        f"trained on {len(runs)} sample runs ({sum(r.failed for r in runs)} failed): "
        f"{detector.kind} chosen by inner CV; model file {path}"
    )
    failed = next(t for t in trajs if t.source.harness == HARNESSES[0] and not t.success)
    ctx.console.print(f"failure risk of failed run {failed.id[:12]} (every 5th step):")
    ctx.console.print(_curve_table(risk_curve(failed, detector)))
    ctx.results["monitor"] = {"model": path, "runs": len(runs)}


def _curve_table(curve: list[tuple[int, float]]) -> Table:
    table = Table()
    table.add_column("step")
    table.add_column("message")
    table.add_column("risk")
    for step, (index, risk) in enumerate(curve, start=1):
        if step % 5 == 0 or step == len(curve):
            table.add_row(str(step), str(index), f"{risk:.2f}")
    return table

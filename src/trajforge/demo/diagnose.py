"""The AET demo step: diagnose the bundled failures, show categories and verified fixes,
score against the human labels, and write both training views."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.table import Table

from trajforge.diagnose.datasets import dataset_of
from trajforge.diagnose.eval import evaluate, reference_label
from trajforge.diagnose.localize import AutoLocalizer
from trajforge.diagnose.run import diagnose_runs, is_failure
from trajforge.diagnose.storage import save_diagnoses
from trajforge.generate.views import write_views

VIEWS_FOLDER = "aet-views"


def demo_step(ctx: Any) -> None:
    """Counterfactual on forkable runs, heuristics on the rest; both views to out_dir."""
    runs = [t for t in ctx.store.query() if is_failure(t)]
    diagnoses = diagnose_runs(runs, AutoLocalizer())
    save_diagnoses(ctx.store, diagnoses)
    pairs = list(zip(runs, diagnoses, strict=True))
    ctx.console.print(category_table(pairs))
    labelled = [(t, d) for t, d in pairs if reference_label(t) is not None]
    if labelled:
        report = evaluate("heuristic", labelled)
        tuned = {dataset_of(t) for t, _ in labelled} & AutoLocalizer.tuned_on
        sample = "IN-SAMPLE: the heuristics were tuned on these runs; " if tuned else ""
        ctx.console.print(
            f"on {report.runs} human-labelled runs ({sample}constant baselines chosen on the "
            f"same runs): exact step {report.exact:.0%} "
            f"(constant baseline {report.baseline_exact:.0%}), agent {report.agent:.0%} "
            f"(baseline {report.baseline_agent:.0%}); out-of-sample figures: "
            "`trajforge diagnose eval`"
        )
    card = write_views(pairs, ctx.out_dir / VIEWS_FOLDER)
    ctx.console.print(
        f"wrote {card['diagnosis_items']} diagnosis and {card['recovery_items']} "
        f"actor-recovery items (verified only) to {ctx.out_dir / VIEWS_FOLDER}"
    )
    ctx.results["aet"] = {"diagnoses": len(diagnoses), "card": card}


def category_table(pairs: list) -> Table:
    """Diagnoses per environment and category, with how many corrections were verified."""
    counts: Counter[tuple[str, str]] = Counter()
    verified: Counter[tuple[str, str]] = Counter()
    methods: dict[tuple[str, str], set[str]] = {}
    for traj, diagnosis in pairs:
        key = (traj.task.environment or "?", diagnosis.category or "not localized")
        counts[key] += 1
        verified[key] += diagnosis.verified
        how = diagnosis.verification.method if diagnosis.verification else "none"
        methods.setdefault(key, set()).add(f"{diagnosis.method}/{how}")
    table = Table(title=f"{len(pairs)} failed runs diagnosed")
    for column in ("environment", "category", "runs", "verified fixes", "method/verified by"):
        table.add_column(column)
    for key in sorted(counts):
        table.add_row(*key, str(counts[key]), str(verified[key]), ", ".join(sorted(methods[key])))
    return table

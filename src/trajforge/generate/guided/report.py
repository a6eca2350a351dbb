"""Recovery over many failed runs: diagnoses, the search, the report, the SFT export."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.diagnose.forking import forkable
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.run import diagnose_run, make_localizer, select_failures
from trajforge.diagnose.storage import load_diagnoses
from trajforge.errors import UserError
from trajforge.generate.guided.search import GuidedRecovery, RecoveryResult
from trajforge.generate.rows import Writer, run_rows, write_forms
from trajforge.models.retry import require_an_answer
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

DATA_FILE = "recovered.jsonl"
REPORT_FILE = "recovery.json"


class SourceCount(BaseModel):
    tried: int = Field(description="Runs where this source gave guidance that was tried.")
    recovered: int = Field(description="Runs recovered with this source's guidance.")


class EnvRecovery(BaseModel):
    failures: int
    recovered: int
    rate: float
    by_source: dict[str, int] = Field(description="Recovered runs per guidance source.")
    intervene_tried: int
    intervene_recovered: int


class RecoveryReport(BaseModel):
    """What `trajforge recover` prints (and writes as recovery.json)."""

    failures: int
    recovered: int
    rate: float
    by_environment: dict[str, EnvRecovery]
    by_source: dict[str, SourceCount]
    privileged_recovered: int = Field(description="Recovered with privileged guidance.")
    rounds: dict[str, float] = Field(description="Teacher runs per recovered run: mean, max.")
    rounds_histogram: dict[str, int]
    leak_rejections: int = Field(description="Passing attempts rejected by the leak check.")
    skipped: int = Field(default=0, description="Failed runs that are not forkable.")
    intervene: SourceCount = Field(description="Intervene-and-replay baseline.")
    failed_calls: int = Field(
        default=0, description="Model calls that failed every retry (each listed in results)."
    )
    results: list[RecoveryResult]


def diagnosis_for(traj: Trajectory, stored: list[Diagnosis]) -> Diagnosis:
    """The run's stored diagnosis (verified first, then a located step, newest last), or a
    fresh one from the auto method (counterfactual where forkable); the fresh one is not
    stored."""
    ranked = sorted(stored, key=lambda d: (d.verified, d.step is not None, d.created_at))
    if ranked:
        return ranked[-1]
    return diagnose_run(traj, make_localizer("auto"))


def recover_runs(
    failures: Iterable[Trajectory],
    recovery: GuidedRecovery,
    diagnoses: Mapping[str, list[Diagnosis]],
    on_run: Callable[[Trajectory], None] | None = None,
    batch: int = 32,
) -> tuple[RecoveryReport, list[Trajectory]]:
    """Search every failed run, `batch` runs at a time (each stage of the search is one
    batch of teacher jobs); the report and the clean demonstrations (not stored)."""
    runs = list(failures)
    results, demos = [], []
    for first in range(0, len(runs), batch):
        chunk = runs[first : first + batch]
        items = [(t, diagnosis_for(t, diagnoses.get(t.id, []))) for t in chunk]
        for traj, (result, demo) in zip(chunk, recovery.recover_many(items), strict=True):
            results.append(result)
            if demo is not None:
                demos.append(demo)
            if on_run is not None:
                on_run(traj)
    return summarize(results), demos


def recover_store(
    store: Store,
    flt: TrajectoryFilter,
    recovery: GuidedRecovery,
    save: bool = True,
    on_run: Callable[[Trajectory], None] | None = None,
) -> tuple[RecoveryReport, list[Trajectory]]:
    """Recover the failed, forkable runs matching `flt`; the clean demonstrations are stored
    in one transaction after the search (when `save`)."""
    failures = select_failures(store, flt)
    runs = [t for t in failures if forkable(t)]
    if not runs:
        envs = ", ".join(sorted({t.task.environment or "(none)" for t in failures}))
        raise UserError(
            f"none of the {len(failures)} failed runs is forkable (environments: {envs})"
        )
    stored: dict[str, list[Diagnosis]] = {}
    for diagnosis in load_diagnoses(store, [t.id for t in runs]):
        stored.setdefault(diagnosis.trajectory_id, []).append(diagnosis)
    report, demos = recover_runs(runs, recovery, stored, on_run)
    attempts = [a for result in report.results for a in result.attempts]
    require_an_answer(
        [a.model_failure for a in attempts], what="teacher run", kept="nothing was recovered"
    )
    report.skipped = len(failures) - len(runs)
    if save and demos:
        store.add_many(demos)
    return report, demos


def summarize(results: list[RecoveryResult]) -> RecoveryReport:
    recovered = [r for r in results if r.recovered]
    rounds = [r.rounds for r in recovered]
    tried = Counter(s for r in results for s in {a.source for a in r.attempts})
    won = Counter(r.source for r in recovered)
    intervene = [r for r in results if r.intervene is not None]
    return RecoveryReport(
        failures=len(results),
        recovered=len(recovered),
        rate=_rate(len(recovered), len(results)),
        by_environment={
            env: _env_summary([r for r in results if (r.environment or "(none)") == env])
            for env in sorted({r.environment or "(none)" for r in results})
        },
        by_source={
            source: SourceCount(tried=tried[source], recovered=won[source])
            for source in sorted(set(tried) - {"intervene"})
        },
        privileged_recovered=sum(r.privileged for r in recovered),
        rounds={"mean": _rate(sum(rounds), len(rounds)), "max": float(max(rounds, default=0))},
        rounds_histogram={str(k): v for k, v in sorted(Counter(rounds).items())},
        leak_rejections=sum(r.leak_rejections for r in results),
        intervene=SourceCount(
            tried=len(intervene), recovered=sum(bool(r.intervene) for r in intervene)
        ),
        failed_calls=sum(len(r.failed_calls) for r in results),
        results=results,
    )


def _env_summary(results: list[RecoveryResult]) -> EnvRecovery:
    recovered = [r for r in results if r.recovered]
    intervene = [r for r in results if r.intervene is not None]
    return EnvRecovery(
        failures=len(results),
        recovered=len(recovered),
        rate=_rate(len(recovered), len(results)),
        by_source=dict(Counter(str(r.source) for r in recovered)),
        intervene_tried=len(intervene),
        intervene_recovered=sum(bool(r.intervene) for r in intervene),
    )


def _rate(part: float, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def demo_rows(demo: Trajectory, writer: Writer = "recover", kind: str = "") -> list[dict[str, Any]]:
    """The training rows of a clean demonstration: the failed run's prefix (assistant turns
    before the fork index `at`) is context only; the teacher's turns are learned."""
    at = demo.metadata.get("recovery", {}).get("at", 0)
    before = [i for i in demo.assistant_indices() if i < at]
    return run_rows(demo, writer, not_learned=before, kind=kind)


def write_recovered(demos: list[Trajectory], report: RecoveryReport, out: Path) -> list[Path]:
    """The training rows (`demo_rows`; `recovered.messages.jsonl` and
    `recovered.prompt-completion.jsonl`, the forms present) and `recovery.json` (the
    report) in `out`; returns the data files."""
    out.mkdir(parents=True, exist_ok=True)
    files = write_forms(out / DATA_FILE, [row for demo in demos for row in demo_rows(demo)])
    (out / REPORT_FILE).write_bytes(orjson.dumps(report.model_dump(), option=orjson.OPT_INDENT_2))
    return list(files.values())

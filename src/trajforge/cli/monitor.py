"""`trajforge monitor train | eval | score`: early failure detection on stored runs."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    console,
    guarded,
    open_store,
    print_json,
)
from trajforge.cli.options import Endpoint, Offer, RunFilter, option_sets
from trajforge.errors import UserError
from trajforge.progress import ProgressLines
from trajforge.schema import Trajectory

if TYPE_CHECKING:
    from trajforge.monitor import RunFeatures
    from trajforge.monitor.detectors import Detector

# trajforge.monitor loads scikit-learn (seconds); commands import it when they run, so the
# rest of the CLI starts fast.

app = typer.Typer(help="Score run prefixes for failure risk and stop doomed runs early.")

DetectorOption = Annotated[
    str, typer.Option("--detector", help="Detector to train: learned, length or rule.")
]
MonitorFileOption = Annotated[
    Path | None,
    typer.Option("--monitor", help="Trained monitor model file (monitor train --out)."),
]
AgentModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "--agent-model",  # deprecated spelling, kept so old scripts still run
        help="Only runs whose agent model contains this.",
    ),
]

MonitorRuns = Annotated[RunFilter, Offer(without=("outcome",), options={"model": AgentModelOption})]


def _stored(db: Path | None, where: RunFilter) -> list[Trajectory]:
    with open_store(db) as store:
        return list(store.query(where.selection()))


def _runs(db: Path | None, where: RunFilter, command: str) -> list[RunFeatures]:
    """Featurized runs of the filter, with progress lines headed `command`."""
    from trajforge.monitor import featurize_runs

    flt = dataclasses.replace(where, limit=None).selection()  # --limit counts usable runs
    with open_store(db) as store:
        lines = ProgressLines(f"{command}: reading", store.count(flt), "run")
        trajs = lines.each(store.query(flt))
        usable = (run for traj in trajs for run in featurize_runs([traj]))
        runs = list(itertools.islice(usable, where.limit))
    lines.finish()
    if not runs:
        raise UserError("no stored runs with a known outcome match the filters")
    return runs


def train_command(
    out: Annotated[Path, typer.Option("--out", help="Where to write the model file.")],
    detector: DetectorOption = "learned",
    db: DbOption = None,
    where: MonitorRuns = RunFilter(),
    json_out: JsonOption = False,
) -> None:
    """Train a detector on the selected runs (all of them) and save it."""
    from trajforge.monitor import DETECTORS, save_detector

    runs = _runs(db, where, "monitor train")
    trained: Detector = DETECTORS.get(detector)()
    trained.fit(runs)
    info: dict[str, Any] = {"runs": len(runs), "failed": sum(r.failed for r in runs)}
    info["trained_groups"] = sorted({r.group for r in runs})
    info |= _learned_info(trained)
    save_detector(trained, out, info)
    summary = {"model_file": str(out), "detector": trained.name, "thresholds": trained.thresholds}
    if json_out:
        print_json(summary | info)
        return
    console.print(_train_report(trained, info, out))


def _train_report(trained: Detector, info: dict, out: Path) -> Table:
    table = Table(title=f"{trained.name} detector trained on {info['runs']} runs -> {out}")
    table.add_column("measure")
    table.add_column("value")
    table.add_row("runs (failed)", f"{info['runs']} ({info['failed']})")
    table.add_row("groups trained on", str(len(info["trained_groups"])))
    if info.get("estimator"):
        table.add_row("estimator chosen", str(info["estimator"]))
        for kind, auroc in (info.get("inner_auroc") or {}).items():
            table.add_row(f"inner CV AUROC of {kind} (training runs)", _rounded(auroc))
    for loss, threshold in trained.thresholds.items():
        table.add_row(f"stop threshold at loss {loss}", _rounded(threshold))
    return table


def _rounded(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else ("-" if value is None else str(value))


def _learned_info(detector: Detector) -> dict[str, Any]:
    from trajforge.monitor.detectors import LearnedDetector

    if not isinstance(detector, LearnedDetector) or detector.kind is None:
        return {}
    return {"estimator": detector.kind, "inner_auroc": detector.inner_auroc}


def eval_command(
    model_file: MonitorFileOption = None,
    db: DbOption = None,
    where: MonitorRuns = RunFilter(),
    folds: Annotated[int, typer.Option("--folds", help="Task-grouped CV folds.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the task split.")] = 0,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap rounds (CIs).")] = 200,
    baselines: Annotated[
        bool, typer.Option("--baselines/--no-baselines", help="Also cross-validate baselines.")
    ] = True,
    json_out: JsonOption = False,
) -> None:
    """Evaluate a model file on the selected runs, or cross-validate by task without one."""
    from trajforge.monitor import (
        DETECTORS,
        cross_validate,
        evaluate_saved,
        headroom,
        load_detector,
        read_header,
    )

    runs = _runs(db, where, "monitor eval")
    detectors = ["learned", *(("length", "rule") if baselines else ())]
    stages = 1 if model_file is not None else folds * len(detectors)
    lines = ProgressLines("monitor eval: evaluating", stages + 1, "stage")
    lines.update(0)
    if model_file is not None:
        trained = read_header(model_file).get("trained_groups")
        summary = evaluate_saved(load_detector(model_file), runs, trained, bootstrap, seed)
        lines.advance()
    else:

        def cv(name: str, rounds: int) -> dict:
            make = _counted(DETECTORS.get(name), lambda: lines.advance(fitting=name))
            return cross_validate(runs, make, folds, seed).summary(rounds)

        summary = cv("learned", bootstrap)
        summary["sample"] = f"out-of-sample: {folds}-fold cross-validation grouped by task"
        if baselines:
            summary["baselines"] = {name: _headline(cv(name, 0)) for name in detectors[1:]}
    lines.advance(fitting="headroom")
    summary["headroom"] = headroom(runs, folds, seed)
    lines.finish()
    if json_out:
        print_json(summary)
        return
    console.print(_summary_table(summary))
    console.print(f"sample: {summary['sample']}")
    if "in_sample" in summary:
        seen = summary["in_sample"]
        console.print(
            f"IN-SAMPLE (not a generalization figure), {seen['runs']} runs of training tasks: "
            f"AUROC at step 10 {seen.get('auroc_at_step.10')}"
        )


def _counted(make: Callable[[], Detector], tick: Callable[[], None]) -> Callable[[], Detector]:
    """`make`, calling `tick` each time a detector is built (once per cross-validation fold)."""

    def counted() -> Detector:
        tick()
        return make()

    return counted


def _headline(summary: dict) -> dict:
    keys = ("auroc_at_step", "auprc_at_step", "tokens_saved_at_loss", "successful_stopped_at_loss")
    return {key: summary[key] for key in keys}


def _summary_table(summary: dict) -> Table:
    table = Table(title=f"{summary['detector']} detector on {summary['runs']} runs")
    table.add_column("measure")
    table.add_column("value")
    table.add_column("95% CI (tasks)")
    ci = summary.get("ci95", {})
    for group in ("auroc_at_step", "auprc_at_step", "tokens_saved_at_loss"):
        for key, value in summary[group].items():
            interval = ci.get(f"{group}.{key}")
            table.add_row(f"{group} {key}", str(value), str(interval or ""))
    for key, value in summary["successful_stopped_at_loss"].items():
        table.add_row(f"successful_stopped_at_loss {key}", str(value), "")
    ceiling = summary["headroom"]
    for key, value in ceiling["perfect_tokens_saved_at_step"].items():
        table.add_row(f"ceiling: perfect stop at step {key} saves", str(value), "")
    table.add_row("ceiling: hindsight AUROC (whole run)", str(ceiling["hindsight_auroc"]), "")
    table.add_row("ceiling: final length AUROC", str(ceiling["final_length_auroc"]), "")
    return table


def score_command(
    traj_id: Annotated[str, typer.Argument(help="Trajectory id or unique prefix.")],
    model_file: MonitorFileOption = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Failure risk after every step of one run (rule baseline unless --monitor is given)."""
    from trajforge.monitor import RuleDetector, load_detector, risk_curve

    detector = load_detector(model_file) if model_file else RuleDetector()
    with open_store(db) as store:
        traj = store.get(traj_id)
    curve = risk_curve(traj, detector)
    threshold = detector.thresholds.get(str(detector.config.default_loss))
    if json_out:
        document = {"id": traj.id, "detector": detector.name, "threshold": threshold}
        print_json(document | {"risk": curve})
        return
    _print_curve(traj, detector, curve)


def _print_curve(traj: Trajectory, detector: Detector, curve: list[tuple[int, float]]) -> None:
    import numpy as np

    from trajforge.monitor.stoprule import stop_step

    threshold = detector.thresholds.get(str(detector.config.default_loss))
    shown = "none" if threshold is None else f"{threshold:.3f}"
    table = Table(title=f"{traj.id[:12]} {detector.name} risk (stop at {shown})")
    for column in ("step", "message", "risk"):
        table.add_column(column)
    risks = np.asarray([risk for _, risk in curve])
    stop = None if threshold is None else stop_step(risks, threshold, detector.config.min_step)
    for step, (index, risk) in enumerate(curve, start=1):
        flag = " [red]stop" if step == stop else ""
        table.add_row(str(step), str(index), f"{risk:.3f}{flag}")
    console.print(table)
    if stop is None:
        console.print("no stop on this run (the rule never fires before min_step or at the end)")


def render_risk(traj: Trajectory, model_file: Path) -> None:
    """Print the risk curve of `traj` under a model file (used by `show --risk`)."""
    from trajforge.monitor import load_detector, risk_curve

    detector = load_detector(model_file)
    _print_curve(traj, detector, risk_curve(traj, detector))


def judge_command(
    step: Annotated[int, typer.Option("--step", min=1, help="Judge runs after this step.")] = 20,
    endpoint: Endpoint = Endpoint(),
    workers: Annotated[int, typer.Option("--workers", min=1, help="Concurrent calls.")] = 4,
    db: DbOption = None,
    where: MonitorRuns = RunFilter(),
    json_out: JsonOption = False,
) -> None:
    """Ask a chat model for the failure risk of each run after --step; AUROC of its answers."""
    from trajforge.models.openai_compat import OpenAICompatibleModel
    from trajforge.monitor.judge import PrefixJudge, judge_at_step, runs_going

    judge = PrefixJudge(OpenAICompatibleModel(endpoint.model_config()))
    going = runs_going(_stored(db, dataclasses.replace(where, limit=None)), step)[: where.limit]
    lines = ProgressLines(f"monitor judge: step {step}", len(going), "run")
    lines.update(0)
    summary = judge_at_step(judge, going, step, workers, lines.advance)
    lines.finish()
    if json_out:
        print_json(summary)
        return
    console.print(
        f"judge {summary['judge']} at step {step}: {summary['runs']} runs "
        f"({summary['failed']} failed), AUROC {summary['auroc']}, AUPRC {summary['auprc']}"
    )
    if summary["failed_calls"]:
        console.print(
            f"[yellow]{summary['failed_calls']} runs not judged: the model call failed after "
            "retries (--json lists the reasons)"
        )


app.command("train")(guarded(option_sets(train_command)))
app.command("eval")(guarded(option_sets(eval_command)))
app.command("score")(guarded(score_command))
app.command("judge")(guarded(option_sets(judge_command)))

"""`trajforge diagnose`: localize, diagnose, correct and verify failures; score; write views."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import (
    BaseUrlOption,
    DbOption,
    EnvOption,
    HarnessOption,
    JsonOption,
    LimitOption,
    LlmModelOption,
    ModelOption,
    TaskOption,
    console,
    guarded,
    make_filter,
    open_store,
    print_json,
    progress_bar,
)
from trajforge.diagnose.eval import EvalReport
from trajforge.diagnose.model import Diagnosis
from trajforge.errors import UserError

MethodOption = Annotated[
    str,
    typer.Option(
        "--method",
        help="counterfactual (forkable runs), heuristic, llm, or auto (counterfactual where "
        "forkable, heuristic elsewhere).",
    ),
]
IdsOption = Annotated[
    list[str] | None, typer.Option("--id", help="Only these trajectory ids (or prefixes).")
]
JudgeModeOption = Annotated[
    str, typer.Option("--judge-mode", help="LLM judge: all-at-once or step-by-step.")
]

JUDGE_MODES = ("all-at-once", "step-by-step")

app = typer.Typer(
    help="Find the decisive error of failed runs, diagnose and correct it, verify the fix.",
    no_args_is_help=False,
)


def _localizer(method: str, base_url: str | None, llm_model: str | None, mode: str):
    from trajforge.diagnose.run import make_localizer

    if method != "llm":
        return make_localizer(method)
    if mode not in JUDGE_MODES:
        raise UserError(f"--judge-mode must be one of {', '.join(JUDGE_MODES)}, got '{mode}'")
    from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig

    model = OpenAICompatibleModel(OpenAIModelConfig(base_url=base_url, model=llm_model))
    return make_localizer("llm", model=model, mode=mode)


@app.callback(invoke_without_command=True)
def diagnose_command(
    ctx: typer.Context,
    db: DbOption = None,
    harness: HarnessOption = None,
    model: ModelOption = None,
    env: EnvOption = None,
    task: TaskOption = None,
    limit: LimitOption = None,
    ids: IdsOption = None,
    method: MethodOption = "heuristic",
    base_url: BaseUrlOption = None,
    llm_model: LlmModelOption = None,
    judge_mode: JudgeModeOption = "all-at-once",
    json_out: JsonOption = False,
) -> None:
    """Diagnose the failed runs matching the filters and store the diagnoses."""
    if ctx.invoked_subcommand is not None:
        return
    guarded(_run)(
        db,
        make_filter(harness, model, env, task, None, limit, ids),
        method,
        base_url,
        llm_model,
        judge_mode,
        json_out,
    )


def _run(db, flt, method, base_url, llm_model, judge_mode, json_out) -> None:
    from trajforge.diagnose.run import diagnose_runs, select_failures
    from trajforge.diagnose.storage import save_diagnoses

    localizer = _localizer(method, base_url, llm_model, judge_mode)
    with open_store(db) as store:
        runs = select_failures(store, flt)
        with progress_bar(json_out) as progress:
            bar = progress.add_task(f"diagnosing ({method})", total=len(runs))
            diagnoses = diagnose_runs(runs, localizer, on_run=lambda _: progress.advance(bar))
        save_diagnoses(store, diagnoses)
    if json_out:
        print_json([d.summary() for d in diagnoses])
        return
    console.print(diagnoses_table(diagnoses))
    verified = sum(d.verified for d in diagnoses)
    console.print(
        f"{len(diagnoses)} failed runs diagnosed; {verified} corrections verified on the first "
        f"proposal ({verified / len(diagnoses):.1%})"
    )


def diagnoses_table(diagnoses: list[Diagnosis]) -> Table:
    table = Table(title=f"{len(diagnoses)} diagnoses")
    for column in ("trajectory", "step", "agent", "category", "verified", "by", "method"):
        table.add_column(column)
    for d in diagnoses:
        verdict = "[green]yes" if d.verified else "[red]no"
        table.add_row(
            d.trajectory_id[:12],
            "-" if d.step is None else str(d.step) + ("+" if d.omission else ""),
            d.agent or "",
            d.category or "",
            verdict,
            d.verification.method if d.verification else "",
            d.method,
        )
    return table


@app.command("eval")
def eval_command(
    db: DbOption = None,
    harness: HarnessOption = None,
    model: ModelOption = None,
    env: EnvOption = None,
    task: TaskOption = None,
    limit: LimitOption = None,
    ids: IdsOption = None,
    method: MethodOption = "heuristic",
    base_url: BaseUrlOption = None,
    llm_model: LlmModelOption = None,
    judge_mode: JudgeModeOption = "all-at-once",
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Ignore stored diagnoses; diagnose again.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Score localization against the stored labels, beside constant baselines.

    Stored diagnoses of the method are scored; runs without one (or all, with --fresh) are
    diagnosed on the fly, without storing.
    """
    guarded(_eval)(
        db,
        make_filter(harness, model, env, task, None, limit, ids),
        method,
        base_url,
        llm_model,
        judge_mode,
        fresh,
        json_out,
    )


def _eval(db, flt, method, base_url, llm_model, judge_mode, fresh, json_out) -> None:
    from trajforge.diagnose.eval import evaluate
    from trajforge.diagnose.run import diagnose_runs, select_failures
    from trajforge.diagnose.storage import load_diagnoses

    with open_store(db) as store:
        runs = select_failures(store, flt)
        ids = [] if fresh else [t.id for t in runs]
        stored = {d.trajectory_id: d for d in load_diagnoses(store, ids, method)}
    missing = [t for t in runs if t.id not in stored]
    if missing:
        localizer = _localizer(method, base_url, llm_model, judge_mode)
        with progress_bar(json_out) as progress:
            bar = progress.add_task(f"diagnosing ({method})", total=len(missing))
            fresh = diagnose_runs(missing, localizer, on_run=lambda _: progress.advance(bar))
        stored |= {d.trajectory_id: d for d in fresh}
    report = evaluate(method, [(t, stored[t.id]) for t in runs])
    if json_out:
        print_json(report.model_dump())
        return
    console.print(eval_table(report))


def eval_table(report: EvalReport) -> Table:
    table = Table(title=f"{report.method} on {report.runs} labelled runs")
    for column in ("measure", "method", "baseline"):
        table.add_column(column, justify="right")

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    table.add_row("exact step", pct(report.exact), pct(report.baseline_exact))
    table.add_row("step ±1", pct(report.within1), pct(report.baseline_within1))
    table.add_row("step ±3", pct(report.within3), pct(report.baseline_within3))
    table.add_row("agent", pct(report.agent), pct(report.baseline_agent))
    table.add_row("verified (forkable)", pct(report.verified_rate), "")
    table.add_row("verified (all)", pct(report.verified_rate_all), "")
    table.add_row("verified, first proposal", pct(report.first_proposal_rate), "")
    return table


@app.command("views")
def views_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the views and card.")],
    db: DbOption = None,
    harness: HarnessOption = None,
    model: ModelOption = None,
    env: EnvOption = None,
    task: TaskOption = None,
    limit: LimitOption = None,
    ids: IdsOption = None,
    method: Annotated[
        str | None, typer.Option("--method", help="Only diagnoses made by this method.")
    ] = None,
    include_unverified: Annotated[
        bool, typer.Option("--all", help="Also write unverified diagnoses.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Write the diagnosis and actor-recovery views (chat JSONL) and the dataset card.

    One item per run: when several methods diagnosed it, a verified diagnosis is preferred,
    then counterfactual, llm, heuristic.
    """
    guarded(_views)(
        db,
        make_filter(harness, model, env, task, None, limit, ids),
        method,
        out,
        include_unverified,
        json_out,
    )


def _views(db, flt, method, out, include_unverified, json_out) -> None:
    from trajforge.diagnose.storage import load_diagnoses
    from trajforge.generate.views import ViewsConfig, write_views

    with open_store(db) as store:
        runs = {t.id: t for t in store.query(flt)}
        diagnoses = load_diagnoses(store, list(runs), method)
    if not diagnoses:
        raise UserError("no stored diagnoses for these runs; run `trajforge diagnose` first")
    pairs = [(runs[d.trajectory_id], d) for d in best_per_run(diagnoses)]
    card = write_views(pairs, out, ViewsConfig(verified_only=not include_unverified))
    if json_out:
        print_json(card)
        return
    console.print(
        f"wrote {card['diagnosis_items']} diagnosis and {card['recovery_items']} recovery items "
        f"to {out} ({'verified only' if card['verified_only'] else 'all'})"
    )


METHOD_PREFERENCE = {"counterfactual": 0, "llm": 1, "heuristic": 2}


def best_per_run(diagnoses: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per run: verified first, then counterfactual, llm, heuristic."""
    best: dict[str, Diagnosis] = {}
    for d in diagnoses:
        rank = (not d.verified, METHOD_PREFERENCE.get(d.method, 9))
        kept = best.get(d.trajectory_id)
        if kept is None or rank < (not kept.verified, METHOD_PREFERENCE.get(kept.method, 9)):
            best[d.trajectory_id] = d
    return list(best.values())

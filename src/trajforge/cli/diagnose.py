"""`trajforge diagnose`: localize, diagnose, correct and verify failures; score; write views."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, get_args

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
from trajforge.cli.options import Endpoint, Offer, RunFilter, RunFilterNoOutcome, option_sets
from trajforge.diagnose.model import Diagnosis
from trajforge.errors import UserError
from trajforge.progress import ProgressLines

MethodOption = Annotated[
    str,
    typer.Option(
        "--method",
        help="counterfactual (forkable runs), heuristic, llm, auto (counterfactual where "
        "forkable, heuristic elsewhere), prior (calibrated step/speaker prior), calibrated "
        "(heuristic with a tuned confidence, prior below it), trained (step ranker: fitted per "
        "fold by eval, or from --model-file).",
    ),
]
IdsOption = Annotated[
    list[str] | None, typer.Option("--id", help="Only these trajectory ids (or prefixes).")
]
JudgeModeOption = Annotated[
    str, typer.Option("--judge-mode", help="LLM judge: all-at-once or step-by-step.")
]

EvidenceOption = Annotated[
    bool,
    typer.Option(
        "--judge-evidence/--no-judge-evidence",
        help="LLM judge: show it the validation log and require citations of it (default).",
    ),
]

EndpointNoKey = Annotated[Endpoint, Offer(without=("api_key",))]
# the judge's key comes from the environment ($TRAJFORGE_API_KEY, $OPENAI_API_KEY)

JUDGE_MODES = ("all-at-once", "step-by-step")

app = typer.Typer(
    help="Find the decisive error of failed runs, diagnose and correct it, verify the fix.",
    no_args_is_help=False,
)


ModelFileOption = Annotated[
    Path | None,
    typer.Option(
        "--model-file", help="A diagnoser trained with `diagnose train` (method trained)."
    ),
]


def _localizer(
    method: str,
    endpoint: Endpoint,
    mode: str,
    model_file: Path | None = None,
    evidence_first: bool = True,
):
    from trajforge.diagnose.run import make_localizer

    if model_file is not None:
        from trajforge.diagnose.calibrated import load_diagnoser

        if method not in ("trained", "calibrated-trained", "heuristic"):
            raise UserError(
                f"--model-file holds a trained diagnoser; --method {method} cannot use it"
            )
        return load_diagnoser(model_file)
    if method != "llm":
        return make_localizer(method)
    from trajforge.diagnose.judge import JudgeConfig, JudgeMode

    judge_mode = next((m for m in get_args(JudgeMode) if m == mode), None)
    if judge_mode is None:
        raise UserError(f"--judge-mode must be one of {', '.join(JUDGE_MODES)}, got '{mode}'")
    from trajforge.models.openai_compat import OpenAICompatibleModel

    model = OpenAICompatibleModel(endpoint.model_config())
    config = JudgeConfig(mode=judge_mode, evidence_first=evidence_first)
    return make_localizer("llm", model=model, config=config)


@app.callback(invoke_without_command=True)
@option_sets
def diagnose_command(
    ctx: typer.Context,
    db: DbOption = None,
    runs: RunFilterNoOutcome = RunFilter(),
    ids: IdsOption = None,
    method: MethodOption = "heuristic",
    endpoint: EndpointNoKey = Endpoint(),
    judge_mode: JudgeModeOption = "all-at-once",
    model_file: ModelFileOption = None,
    judge_evidence: EvidenceOption = True,
    json_out: JsonOption = False,
) -> None:
    """Diagnose the failed runs matching the filters and store the diagnoses."""
    if ctx.invoked_subcommand is not None:
        return
    guarded(_run)(
        db,
        runs.selection(ids),
        lambda: _localizer(method, endpoint, judge_mode, model_file, judge_evidence),
        json_out,
    )


def _run(db, flt, make_localizer, json_out) -> None:
    from trajforge.diagnose.run import diagnose_store

    localizer = make_localizer()
    method = localizer.name
    lines = ProgressLines(f"diagnose ({method})", None, "run")
    with open_store(db) as store:
        diagnoses = diagnose_store(
            store, flt, localizer, on_run=lambda _: lines.advance(),
            on_selected=lambda count: _expect(lines, count),
        )  # fmt: skip
    lines.finish()
    if json_out:
        print_json([d.summary() for d in diagnoses])
        return
    console.print(diagnoses_table(diagnoses))
    _print_deviations(diagnoses)
    verified = sum(d.verified for d in diagnoses)
    console.print(
        f"{len(diagnoses)} failed runs diagnosed; {verified} corrections verified on the first "
        f"proposal ({verified / len(diagnoses):.1%})"
    )
    _print_failed_calls(diagnoses)


def _print_failed_calls(diagnoses: list[Diagnosis]) -> None:
    failed = [d for d in diagnoses if d.failure()]
    if not failed:
        return
    console.print(
        f"[yellow]{len(failed)} of {len(diagnoses)} runs got no diagnosis: the model call failed "
        "after retries or its answer was invalid (stored with the reason):"
    )
    for d in failed:
        console.print(f"  {d.trajectory_id}: {d.failure()}", markup=False)


TABLE_CAPTION = (
    "decisive msg: message index of the decisive error (N+ = an omission: the run ended at "
    "message N without the action it needed; - = none found). no return (counterfactual): "
    "the last message from which the expert still succeeds. first dev: the first message "
    "where the expert would have acted otherwise and it matters (*: the correction there "
    "alone repairs the run). verified: the correction, sent at the decisive message and "
    "continued by the expert (fork) or checked against the record (evidence), passes; it "
    "does not say the message is the first mistake."
)


def diagnoses_table(diagnoses: list[Diagnosis]) -> Table:
    table = Table(title=f"{len(diagnoses)} diagnoses", caption=TABLE_CAPTION)
    columns = ("trajectory", "decisive msg", "no return", "first dev", "agent", "category")
    for column in (*columns, "correction", "verified", "by", "method"):
        table.add_column(column, overflow="fold" if column == "correction" else "ellipsis")
    for d in diagnoses:
        table.add_row(
            d.trajectory_id,
            "-" if d.step is None else str(d.step) + ("+" if d.omission else ""),
            "" if d.point_of_no_return is None else str(d.point_of_no_return),
            _deviation_cell(d),
            d.agent or "",
            d.category or "",
            _shorten(d.correction.text()) if d.correction else "",
            "[green]yes" if d.verified else "[red]no",
            d.verification.method if d.verification else "",
            d.method + (" (abstained: prior)" if d.abstained else ""),
        )
    return table


def _deviation_cell(d: Diagnosis) -> str:
    found = d.first_deviation
    if found is None:
        return ""
    return f"{found.message_index}{'*' if found.repaired else ''} {found.reason}"


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _print_deviations(diagnoses: list[Diagnosis]) -> None:
    """The first deviations before the point of no return, with their corrections."""
    earlier = [
        d
        for d in diagnoses
        if d.first_deviation and d.step is not None and d.first_deviation.message_index < d.step
    ]
    for d in earlier:
        found = d.first_deviation
        assert found is not None
        fix = found.correction.text() if found.correction else "-"
        repaired = {True: "repairs the run", False: "does not repair it alone", None: "not tried"}
        console.print(
            f"{d.trajectory_id}: first deviation at message {found.message_index} "
            f"({found.reason}: {found.detail}); correction: {_shorten(fix, 120)} "
            f"[{repaired[found.repaired]}]",
            markup=False,
        )


SplitOption = Annotated[
    str,
    typer.Option(
        "--split",
        help="How tuned methods are kept off their test runs: task (k folds of each dataset's "
        "tasks) or dataset (tuned on the other datasets).",
    ),
]
NeverTuneOption = Annotated[
    list[str] | None,
    typer.Option(
        "--never-tune",
        help="A dataset (e.g. who-and-when/hand-crafted) scored but never used as tuning data.",
    ),
]


@app.command("eval")
@option_sets
def eval_command(
    db: DbOption = None,
    runs: RunFilterNoOutcome = RunFilter(),
    ids: IdsOption = None,
    method: MethodOption = "heuristic",
    endpoint: EndpointNoKey = Endpoint(),
    judge_mode: JudgeModeOption = "all-at-once",
    split: SplitOption = "task",
    folds: Annotated[int, typer.Option("--folds", help="Task folds per dataset.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seed of folds and bootstrap.")] = 0,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap rounds.")] = 1000,
    never_tune: NeverTuneOption = None,
    model_file: ModelFileOption = None,
    judge_evidence: EvidenceOption = True,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Ignore stored diagnoses; diagnose again.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Score localization out of sample, per dataset, beside constant baselines.

    A method with tuned parts is scored only on runs it was not tuned on (fitted methods are
    refitted per fold; hand-tuned ones are labelled in-sample on their own tuning data).
    Baselines are chosen on the tuning side of the split. Stored diagnoses of methods without
    fitted parts are reused unless --fresh.
    """
    guarded(_eval)(
        db,
        runs.selection(ids),
        lambda: _localizer(method, endpoint, judge_mode, model_file, judge_evidence),
        lambda: _holdout_config(split, folds, seed, bootstrap, never_tune),
        fresh,
        json_out,
    )


def _holdout_config(split, folds, seed, bootstrap, never_tune):
    from trajforge.diagnose.holdout import HoldoutConfig

    if split not in ("task", "dataset"):
        raise UserError(f"--split must be task or dataset, got '{split}'")
    if folds < 2:
        raise UserError(f"--folds must be at least 2, got {folds}")
    never = frozenset(never_tune or [])
    return HoldoutConfig(split=split, folds=folds, seed=seed, bootstrap=bootstrap, never_tune=never)


def _expect(lines: ProgressLines, count: int) -> None:
    lines.total = count
    lines.update(lines.done)


def _eval(db, flt, make_localizer, make_config, fresh, json_out) -> None:
    from trajforge.diagnose.holdout import evaluate_store

    localizer, config = make_localizer(), make_config()
    lines = ProgressLines(f"diagnose eval ({localizer.name})", None, "run")
    lines.update(0)
    with open_store(db) as store:
        report = evaluate_store(
            store, flt, localizer, config, fresh, on_run=lambda _: lines.advance()
        )
    lines.finish()
    if json_out:
        print_json(report)
        return
    for item in report["datasets"]:
        console.print(eval_table(report["method"], item))
        console.print(f"split: {item['split']}\n")


def eval_table(method: str, item: dict) -> Table:
    """One dataset's scores beside the baselines (95% bootstrap intervals)."""
    title = f"{method} on {item['dataset']}: {item['runs']} runs, {item['sample'].upper()}"
    table = Table(title=title)
    for column in ("measure", "method", "baseline"):
        table.add_column(column, justify="right")
    scores, base, answered = item["scores"], item["baselines"], item["answered"]
    for key, label in (("exact", "exact step"), ("within1", "step ±1"), ("within3", "step ±3")):
        table.add_row(label, _pct(scores[key]), _pct(base[key]))
    table.add_row("agent", _pct(scores["agent"]), _pct(base["agent"]))
    table.add_row("coverage (not abstained)", _pct(item["coverage"]), "")
    table.add_row("exact step, answered only", _pct(answered["exact"]), "")
    table.add_row("agent, answered only", _pct(answered["agent"]), "")
    return table


def _pct(metric: dict) -> str:
    if metric["value"] is None:
        return "-"
    ci = metric.get("ci95")
    span = f" [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else ""
    return f"{metric['value']:.1%}{span}"


@app.command("synthesize")
def synthesize_command(
    env: Annotated[
        str,
        typer.Option(
            "--env", help="tau-retail, tau-airline, tau2-retail, tau2-airline, household."
        ),
    ],
    db: DbOption = None,
    failures: Annotated[int, typer.Option("--failures", help="Failed runs wanted.")] = 50,
    error_rate: Annotated[
        float, typer.Option("--error-rate", help="Noisy-expert mistake rate.")
    ] = 0.2,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the mistakes.")] = 0,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", help="Give up after this many runs.")
    ] = 1000,
    json_out: JsonOption = False,
) -> None:
    """Store noisy-expert failures labelled with their counterfactual decisive step."""
    guarded(_synthesize)(db, env, failures, error_rate, seed, max_attempts, json_out)


def _synthesize(db, env, failures, error_rate, seed, max_attempts, json_out) -> None:
    from trajforge.diagnose.synthetic import SyntheticConfig, synthesize_into_store

    config = SyntheticConfig(
        environment=env,
        failures=failures,
        error_rate=error_rate,
        seed=seed,
        max_attempts=max_attempts,
    )
    with open_store(db, must_exist=False) as store:
        made, added = synthesize_into_store(store, config)
    summary = {"environment": env, "failures": made, "added": added}
    if json_out:
        print_json(summary)
        return
    console.print(f"{made} labelled {env} failures made, {added} new in the store")


@app.command("train")
@option_sets
def train_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the model file.")],
    db: DbOption = None,
    runs: RunFilterNoOutcome = RunFilter(),
    ids: IdsOption = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="Also calibrate its confidence and the fallback prior (calibrated-trained).",
        ),
    ] = True,
    json_out: JsonOption = False,
) -> None:
    """Train the step-ranking diagnoser on the labelled failed runs matching the filters.

    The model file records the datasets and tasks it was trained on: `diagnose eval
    --model-file` scores those as in-sample, apart from the rest. With --calibrate (default)
    it abstains to the calibrated prior below the confidence chosen on the training runs.
    """
    flt = runs.selection(ids)
    guarded(_train)(db, flt, out, calibrate, json_out)


def _train(db, flt, out, calibrate, json_out) -> None:
    from trajforge.diagnose.calibrated import calibrated_trained, with_calibration
    from trajforge.diagnose.trained import fit_ranker, labelled_failures, save_ranker

    with open_store(db) as store:
        runs = labelled_failures(store, flt)
    trained = with_calibration(calibrated_trained().fit(runs)) if calibrate else fit_ranker(runs)
    save_ranker(trained, out)
    summary = {"model_file": str(out), "runs": trained.runs, "trained_on": trained.trained_on}
    if json_out:
        print_json(summary)
        return
    console.print(f"trained on {trained.runs} runs of {', '.join(trained.trained_on)} -> {out}")


@app.command("views")
@option_sets
def views_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the views and card.")],
    db: DbOption = None,
    runs: RunFilterNoOutcome = RunFilter(),
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
        runs.selection(ids),
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

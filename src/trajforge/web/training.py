"""Training: the loops that record into this store (`trajforge train rl`), as they run.

Per run: its settings, plots of reward, the rollout–training logprob correlation and held-out
success with its 95% interval per iteration, and a table of every iteration's row (newest
first). The rows are the loop's own (`metrics.json`), read from the store's
`training_iterations`; `training_events` sends a run's section again whenever the loop writes
a row, so the page follows the run without a reload.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request

from trajforge.store import Store
from trajforge.store.training import (
    TrainingIteration,
    TrainingRun,
    iteration_changes_since,
    latest_iteration_seq,
    training_iterations,
    training_run,
)
from trajforge.web.html import h
from trajforge.web.live import event, poll_stream
from trajforge.web.plots import Point, series_plot
from trajforge.web.reading import StoreReads

COLUMNS = ["iteration", "reward", "train success", "correlation", "max |Δlogp|", "KL", "entropy",
           "loss", "zero-variance groups", "episodes", "episodes/s", "tokens/s", "drift dropped",
           "stopped", "held-out (95% CI)", "written"]  # fmt: skip


def iteration_rows(store: Store, name: str) -> list[dict[str, Any]]:
    return [orjson.loads(row.doc) for row in training_iterations(store, name)]


def api_training(store: Store, runs: list[TrainingRun]) -> dict[str, Any]:
    """`{"runs": [{name, kind, started_at, last_written, settings, iterations: [row...]}]}`."""
    return {
        "runs": [
            {
                "name": run.name,
                "kind": run.kind,
                "started_at": run.started_at,
                "last_written": run.last_written,
                "settings": orjson.loads(run.doc),
                "iterations": iteration_rows(store, run.name),
            }
            for run in runs
        ]
    }


def training_page(store: Store, runs: list[TrainingRun]) -> str:
    seq = latest_iteration_seq(store)  # the page's events start after what it shows
    sections = "".join(run_section(store, run) for run in runs)
    empty = (
        ""
        if runs
        else '<p id="no-training" class="dim">No training run has written to this store yet. '
        "<code>trajforge train rl --out OUT ...</code> records into <code>OUT/rollouts.db</code>; "
        "watch it with <code>trajforge ui --db OUT/rollouts.db</code>.</p>"
    )
    return (
        "<h1>Training</h1><p class=dim>Each iteration's row appears here when the loop writes "
        'it.</p><p id="training-status" class="dim">connecting…</p>'
        f'{empty}<div id="training" data-after="{seq}">{sections}</div>'
    )


def run_section(store: Store, run: TrainingRun, fresh: int | None = None) -> str:
    """One run: settings, three plots and the iteration table; row `fresh` is marked new."""
    settings = orjson.loads(run.doc)
    records = training_iterations(store, run.name)
    rows = [orjson.loads(record.doc) for record in records]
    return (
        f'<section class="training-run" data-run="{h(run.name)}">'
        f"<h2>{h(run.kind)} · {h(run.name)}</h2>{_facts(run, settings, rows)}"
        f'<div class="plots">{_plots(rows, settings)}</div>'
        f"{_iteration_table(records, rows, settings.get('initial'), fresh)}</section>"
    )


def _iteration_table(
    records: list[TrainingIteration], rows: list[dict[str, Any]], initial: dict | None,
    fresh: int | None,
) -> str:  # fmt: skip
    """Newest iteration first; the held-out success of the start (iteration 0) last."""
    body = []
    for record, row in zip(reversed(records), reversed(rows), strict=True):
        cls = ' class="live"' if record.iteration == fresh else ""
        cells = [*_row_cells(row), _clock(record.written_at)]
        tds = "".join(f"<td>{c}</td>" for c in cells)
        body.append(f'<tr data-iteration="{record.iteration}"{cls}>{tds}</tr>')
    if initial:
        cells = ["start", *[""] * (len(COLUMNS) - 3), _held_out(initial), ""]
        body.append('<tr data-iteration="0">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h(c)}</th>" for c in COLUMNS)
    return (
        f'<table class="grid iterations"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _facts(run: TrainingRun, settings: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    config = settings.get("config") or {}
    planned = config.get("iterations", "?")
    facts = {
        "base": settings.get("base"),
        "reward": config.get("reward"),
        "lr": config.get("lr"),
        "tasks × group": f"{config.get('tasks_per_iteration')} × {config.get('group_size')}",
        "iterations": f"{len(rows)} of {planned}",
        "held-out every": config.get("eval_every"),
        "started": _clock(run.started_at),
        "last row": _clock(run.last_written),
    }
    cells = "".join(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts.items())
    return f'<dl class="facts">{cells}</dl>'


def _plots(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """Reward and training success; correlation against the loop's floor; held-out success."""
    reward, success = _points(rows, "reward"), _points(rows, "success")
    top = _axis_top([v for _, v in reward + success])
    correlation = _points(rows, "correlation")
    floor = (settings.get("config") or {}).get("min_correlation")
    low = min([0.99, *(v for _, v in correlation), *([floor] if floor is not None else [])])
    low = math.floor(low * 1000) / 1000
    held = _held_out_points(rows, settings.get("initial"))
    held_line = {"held-out success (95% CI)": [(x, v) for x, v, _, _ in held]}
    bands = {"held-out success (95% CI)": [(x, lo, hi) for x, _, lo, hi in held]}
    trained = {"reward": reward, "train success": success}
    agreement = {"rollout–training logprob correlation": correlation}
    return (
        _figure("reward", trained, series_plot(trained, 0.0, top, "reward"))
        + _figure(
            "correlation",
            agreement,
            series_plot(agreement, low, 1.0, "correlation", threshold=floor),
        )
        + _figure(
            "held-out",
            held_line,
            series_plot(held_line, 0.0, _axis_top([hi for *_, hi in held]), "success", bands=bands),
        )
    )


def _axis_top(values: list[float]) -> float:
    """The smallest of 0.1, 0.25, 0.5, 1 (then the next whole number) above every value, so
    that rates of a few percent are not drawn flat against a 0..1 axis."""
    peak = max(values, default=0.0)
    return next((top for top in (0.1, 0.25, 0.5, 1.0) if peak <= top), float(math.ceil(peak)))


def _figure(name: str, series: dict[str, list[Point]], svg: str) -> str:
    legend = "".join(
        f'<span class="swatch series{i}"></span>{h(label)}' for i, label in enumerate(series)
    )
    caption = f"<figcaption>{legend}</figcaption>"
    return f'<figure class="plot" data-plot="{name}">{svg}{caption}</figure>'


def _points(rows: list[dict[str, Any]], key: str) -> list[Point]:
    return [
        (int(row["iteration"]), float(row[key]))
        for row in rows
        if isinstance(row.get(key), int | float)
    ]


def _held_out_points(
    rows: list[dict[str, Any]], initial: dict[str, Any] | None
) -> list[tuple[int, float, float, float]]:
    """(iteration, rate, lo, hi) of every held-out evaluation, the start as iteration 0."""
    found = [(0, initial)] if initial else []
    found += [(int(row["iteration"]), row["heldout"]) for row in rows if row.get("heldout")]
    return [(x, float(e["rate"]), float(e["ci"][0]), float(e["ci"][1])) for x, e in found]


def _row_cells(row: dict[str, Any]) -> list[str]:
    keys = [
        "kl", "entropy", "loss", "zero_variance_groups", "episodes", "episodes_per_s",
        "tokens_per_s", "drift_points_dropped",
    ]  # fmt: skip
    stopped = f"{row['stopped']}/{row.get('episodes', '?')}" if row.get("monitor_on") else ""
    held = _held_out(row["heldout"]) if row.get("heldout") else ""
    return [
        h(row.get("iteration")),
        _number(row.get("reward")),
        _number(row.get("success")),
        _fixed(row.get("correlation"), ".6f"),
        _fixed(row.get("max_logprob_diff"), ".1e"),
        *(_number(row.get(k)) for k in keys),
        h(stopped),
        held,
    ]


def _held_out(result: dict[str, Any]) -> str:
    low, high = result["ci"]
    size = f"<span class=dim>n={h(result.get('n'))}</span>"
    return f"{result['rate']:.3f} [{low:.3f}, {high:.3f}] {size}"


def _fixed(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else h(value)


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return h(value)


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else "—"


async def training_events(
    reads: StoreReads, request: Request, after: int | None, only: str = ""
) -> AsyncIterator[bytes]:
    """`event: iteration` whenever a loop writes a row after `after` (default: now), of run
    `only` if given: the run's whole section, re-rendered with the new row marked."""
    seq = await reads(latest_iteration_seq) if after is None else after

    def poll(store: Store) -> list[bytes]:
        nonlocal seq
        changes = iteration_changes_since(store, seq)
        if not changes:
            return []
        newest = {c.run: c.iteration for c in changes if not only or c.run == only}
        events = []
        for name, iteration in newest.items():
            run = training_run(store, name)
            if run is not None:
                html = run_section(store, run, fresh=iteration)
                data = {"run": name, "iteration": iteration, "html": html}
                events.append(event("iteration", data))
        seq = changes[-1].seq  # moved once every change is rendered
        return events

    return poll_stream(request, reads, poll)

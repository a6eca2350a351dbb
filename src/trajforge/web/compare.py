"""Compare groups of runs: success with Wilson intervals, pass^k per task, step and token
distributions, and the tasks where the groups disagree.

A group is `FIELD:VALUE` with FIELD one of model (a substring), run, source, env, or several
joined by commas (`?g=model:gpt-4o,env:tau-airline&g=...`); or `?by=FIELD` for the most
common values of one field.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from math import sqrt

from pydantic import BaseModel

from trajforge.errors import UserError
from trajforge.evaluate.robustness import pass_hat_k
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.runs import group_outcomes, run_groups
from trajforge.web.html import h, link, table, url
from trajforge.web.plots import histogram

FIELDS = {"model": "model", "run": "run", "source": "harness", "env": "environment"}
MAX_K = 4


class GroupStats(BaseModel):
    name: str
    runs: int
    judged: int
    successes: int
    rate: float | None
    low: float | None
    high: float | None
    pass_k: dict[int, float | None]
    steps: list[int]
    tokens: list[int]
    by_task: dict[str, list[bool]]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson score interval of a success rate (None without trials)."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def group_filter(spec: str) -> TrajectoryFilter:
    """A group's filter: `FIELD:VALUE`, or several joined by commas (all must hold)."""
    fields: dict[str, object] = {}
    for part in spec.split(","):
        field, _, value = part.strip().partition(":")
        if field not in FIELDS or not value:
            raise UserError(
                f"group '{spec}' is not FIELD:VALUE[,FIELD:VALUE...] with FIELD one of "
                f"{', '.join(FIELDS)}"
            )
        fields[FIELDS[field]] = value
    return TrajectoryFilter.model_validate(fields)


def group_stats(store: Store, spec: str) -> GroupStats:
    rows = group_outcomes(store, group_filter(spec))
    by_task: dict[str, list[bool]] = defaultdict(list)
    for task, success, _, _ in rows:
        if success is not None:
            by_task[task or "?"].append(success)
    judged = sum(len(v) for v in by_task.values())
    successes = sum(sum(v) for v in by_task.values())
    interval = wilson(successes, judged)
    return GroupStats(
        name=spec,
        runs=len(rows),
        judged=judged,
        successes=successes,
        rate=successes / judged if judged else None,
        low=interval[0] if interval else None,
        high=interval[1] if interval else None,
        pass_k={k: pass_hat_k(by_task, k) for k in range(1, MAX_K + 1)},
        steps=[steps for _, _, steps, _ in rows],
        tokens=[tokens for _, _, _, tokens in rows if tokens is not None],
        by_task=dict(by_task),
    )


def group_specs(store: Store, params_groups: Sequence[str], by: str | None) -> list[str]:
    if params_groups:
        return list(params_groups)
    if by:
        if by not in FIELDS:
            raise UserError(f"cannot group by '{by}'; use one of {', '.join(FIELDS)}")
        values = run_groups(store, FIELDS[by], limit=6)
        return [f"{by}:{value}" for value, _ in values if value]
    return []


def disagreements(groups: list[GroupStats]) -> list[tuple[str, list[float | None]]]:
    """Tasks run by at least two groups whose success rates there differ by at least half."""
    tasks = set().union(*(g.by_task for g in groups)) if groups else set()
    found = []
    for task in sorted(tasks):
        rates = [
            sum(g.by_task[task]) / len(g.by_task[task]) if task in g.by_task else None
            for g in groups
        ]
        present = [r for r in rates if r is not None]
        if len(present) >= 2 and max(present) - min(present) >= 0.5:
            found.append((task, rates))
    return found


def compare_page(store: Store, specs: list[str]) -> str:
    form = _form(specs)
    if len(specs) < 2:
        return form + "<p>Pick two or more groups, or group by a field.</p>"
    groups = [group_stats(store, spec) for spec in specs]
    return "".join(
        [
            form,
            "<h2>Success</h2>",
            _success_table(groups),
            "<h2>Steps per run</h2>",
            histogram({g.name: g.steps for g in groups}, label="steps"),
            _key(groups),
            "<h2>Tokens per run</h2>",
            histogram({g.name: g.tokens for g in groups}, label="tokens"),
            _disagreements_table(groups),
        ]
    )


def _form(specs: list[str]) -> str:
    inputs = "".join(
        f'<input name="g" value="{h(spec)}" placeholder="model:NAME">' for spec in [*specs, "", ""]
    )
    by = " · ".join(link(url("/compare", {"by": f}), f"by {f}") for f in FIELDS)
    return (
        '<h1>Compare</h1><form method="get" action="/compare" class="filters">'
        f"groups (FIELD:VALUE[,FIELD:VALUE...], FIELD one of {', '.join(FIELDS)}): {inputs}"
        f"<button>Compare</button></form><p>{by}</p>"
    )


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _success_table(groups: list[GroupStats]) -> str:
    headers = [
        "group",
        "runs",
        "judged",
        "success",
        "95% CI",
        *[f"pass^{k}" for k in range(1, MAX_K + 1)],
    ]
    rows = [
        [
            f'<span class="swatch series{n % 6}"></span>{h(g.name)}',
            str(g.runs),
            str(g.judged),
            _fmt(g.rate),
            f"[{_fmt(g.low)}, {_fmt(g.high)}]",
            *[_fmt(g.pass_k[k]) for k in range(1, MAX_K + 1)],
        ]
        for n, g in enumerate(groups)
    ]
    return table(headers, rows).replace('class="grid"', 'class="grid" id="compare-table"', 1)


def _key(groups: list[GroupStats]) -> str:
    return (
        "<p>"
        + " ".join(
            f'<span class="swatch series{n % 6}"></span>{h(g.name)}' for n, g in enumerate(groups)
        )
        + "</p>"
    )


def _disagreements_table(groups: list[GroupStats]) -> str:
    found = disagreements(groups)
    if not found:
        return "<h2>Tasks where they disagree</h2><p>none (no shared task differs by ≥ 0.5)</p>"
    headers = ["task", *[h(g.name) for g in groups]]
    rows = [
        [link(url("/", {"task": task}), task), *[_fmt(rate) for rate in rates]]
        for task, rates in found
    ]
    return (
        f"<h2>Tasks where they disagree ({len(found)})</h2><p class=dim>success rate per task, "
        f"shown when two groups differ by at least 0.5</p>{table(headers, rows)}"
    )

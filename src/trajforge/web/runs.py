"""The runs page and its JSON API: filters, search, sorting and pages, all in the URL."""

from __future__ import annotations

from collections.abc import Mapping

from trajforge.store import Store
from trajforge.store.runs import SNIPPET_MARKS, RunPage, RunQuery, RunSummary, run_page
from trajforge.web.html import h, link, outcome_badge, run_link, url
from trajforge.web.queries import run_query, state

COLUMNS = (
    ("id", None),
    ("source", "harness"),
    ("model", "model"),
    ("environment", "environment"),
    ("task", "task_id"),
    ("outcome", "success"),
    ("steps", "steps"),
    ("tokens", "tokens"),
    ("labels", None),
    ("faults", None),
    ("diagnosis", None),
)


def api_runs(store: Store, params: Mapping[str, str]) -> dict:
    """`GET /api/runs`: {"total": N, "runs": [...]} for the URL's filters and search."""
    result = run_page(store, run_query(params))
    return {"total": result.total, "runs": [_run_json(run) for run in result.runs]}


def _run_json(run: RunSummary) -> dict:
    data = run.as_json()
    if data["snippet"] is not None:
        start, end = SNIPPET_MARKS
        data["snippet"] = data["snippet"].replace(start, "[").replace(end, "]")
    return data


def runs_page(store: Store, params: Mapping[str, str], risk: bool) -> str:
    """The body of the runs page; with `risk`, a failure-risk column the page fills in from
    `/api/risk` after it shows (scoring fifty runs takes longer than the page)."""
    query = run_query(params)
    result = run_page(store, query)
    parts = [
        _search_form(params),
        _summary_line(query, result),
        _runs_table(params, query, result, risk),
        _pager(params, query, result),
    ]
    return "".join(parts)


def _search_form(params: Mapping[str, str]) -> str:
    def field(name: str, label: str, width: str = "") -> str:
        style = f' style="width:{width}"' if width else ""
        return f'<label>{label} <input name="{name}" value="{h(params.get(name))}"{style}></label>'

    outcome = params.get("outcome") or ""
    options = "".join(
        f'<option value="{v}"{" selected" if v == outcome else ""}>{v or "any"}</option>'
        for v in ("", "success", "failure")
    )
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{h(params.get(k))}">'
        for k in ("sort", "dir", "forks")
        if params.get(k)
    )
    return (
        '<form class="filters" method="get" action="/" id="search-form">'
        f'<input id="q" name="q" placeholder="search messages, tools, errors, labels, diagnoses" '
        f'value="{h(params.get("q"))}" class="search">'
        f"{field('harness', 'source', '8em')}{field('model', 'model', '8em')}"
        f"{field('env', 'env', '8em')}{field('task', 'task', '6em')}{field('run', 'run', '6em')}"
        f"<label>outcome <select name=outcome>{options}</select></label>{hidden}"
        '<button type="submit">Search</button> <a href="/">clear</a></form>'
    )


def _summary_line(query: RunQuery, result: RunPage) -> str:
    first = (query.page - 1) * query.per_page + 1 if result.runs else 0
    last = first + len(result.runs) - 1 if result.runs else 0
    what = f" matching <b>{h(query.q)}</b>" if query.q else ""
    return (
        f'<p class="summary" id="run-count" data-total="{result.total}">'
        f"{result.total} runs{what}; showing {first}–{last}"
        ' <span id="live-note" class="dim"></span></p>'
    )


def _header(params: Mapping[str, str], query: RunQuery, name: str, key: str | None) -> str:
    if key is None:
        return h(name)
    same = query.sort == key
    direction = "asc" if same and query.descending else "desc"
    arrow = (" ▼" if query.descending else " ▲") if same else ""
    return link(url("/", state(params, sort=key, dir=direction, page=1)), name + arrow)


def _runs_table(params: Mapping[str, str], query: RunQuery, result: RunPage, risk: bool) -> str:
    headers = [_header(params, query, name, key) for name, key in COLUMNS]
    if risk:
        headers.append("risk")
    link_params = {"q": query.q} if query.q else None
    body = []
    for run in result.runs:
        body.append(_row_html(run, row_cells(run, link_params, risk)))
        if run.snippet:
            body.append(
                f'<tr class="sub"><td colspan="{len(headers)}"><span class="snippet">'
                f"{_snippet_html(run.snippet)}</span></td></tr>"
            )
    head = "".join(f"<th>{cell}</th>" for cell in headers)
    return (
        f'<table class="grid" id="runs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _row_html(run: RunSummary, cells: list[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f'<tr data-id="{h(run.id)}"{attr}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def row_cells(run: RunSummary, link_params: Mapping[str, object] | None, risk: bool) -> list[str]:
    """The cells of one run's row in the runs table (HTML)."""
    fork = " <span class=dim>fork</span>" if run.parent_id else ""
    cells = [
        run_link(run.id, link_params) + fork,
        h(run.source),
        h(run.model),
        h(run.environment),
        h(run.task_id),
        outcome_badge(run.status),
        str(run.steps),
        "" if run.tokens is None else f"{run.tokens:,}",
        _tally(run.labels),
        _tally(run.faults),
        h(" ".join(run.diagnoses)),
    ]
    if risk:
        cells.append(f'<span data-risk="{h(run.id)}" class="dim">…</span>')
    return cells


def live_row(store: Store, traj_id: str, params: Mapping[str, str]) -> tuple[str, dict] | None:
    """The runs-table row (HTML) and JSON of one run when it matches the page's filters."""
    query = run_query(params)
    flt = query.filter.model_copy(update={"ids": [traj_id]})
    result = run_page(store, query.model_copy(update={"filter": flt, "page": 1, "per_page": 1}))
    if not result.runs:
        return None
    run = result.runs[0]
    return _row_html(run, row_cells(run, None, False), "live"), _run_json(run)


def _tally(items: list[str]) -> str:
    """`kind:message` items as counts by kind ("oracle ×3"), the full list on hover."""
    if not items:
        return ""
    counts: dict[str, int] = {}
    for item in items:
        kind = item.split(":", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    shown = ", ".join(f"{kind} ×{n}" if n > 1 else kind for kind, n in counts.items())
    return f'<span title="{h(" ".join(items))}">{h(shown)}</span>'


def _snippet_html(snippet: str) -> str:
    start, end = SNIPPET_MARKS
    return h(snippet).replace(start, "<mark>").replace(end, "</mark>")


def _pager(params: Mapping[str, str], query: RunQuery, result: RunPage) -> str:
    pages = max(1, -(-result.total // query.per_page))
    links = []
    if query.page > 1:
        links.append(link(url("/", state(params, page=query.page - 1)), "← previous"))
    links.append(f"page {query.page} of {pages}")
    if query.page < pages:
        links.append(link(url("/", state(params, page=query.page + 1)), "next →", "next"))
    return f'<p class="pager">{" · ".join(links)}</p>'

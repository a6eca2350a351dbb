"""Reading a page's state from its URL: the same words as the CLI's filter options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import get_args

from pydantic import ValidationError

from trajforge.errors import UserError
from trajforge.store import TrajectoryFilter
from trajforge.store.runs import MAX_PAGE, MAX_PER_PAGE, RunQuery, SortKey
from trajforge.web.params import whole

FILTER_KEYS = ("harness", "model", "env", "task", "outcome", "run", "forks")
"""URL parameters that select runs (`--harness`, `--model`, `--env`, `--task`, `--outcome`
of the CLI, plus the run name and forks=only|none)."""


def run_filter(params: Mapping[str, str]) -> TrajectoryFilter:
    """A filter from URL parameters; a bad value is a `UserError` naming it."""
    outcome = params.get("outcome") or None
    if outcome not in (None, "success", "failure"):
        raise UserError(f"outcome must be 'success' or 'failure', got '{outcome}'")
    forks = params.get("forks") or None
    if forks not in (None, "only", "none"):
        raise UserError(f"forks must be 'only' or 'none', got '{forks}'")
    return TrajectoryFilter(
        harness=params.get("harness") or None,
        model=params.get("model") or None,
        environment=params.get("env") or None,
        task_id=params.get("task") or None,
        run=params.get("run") or None,
        success=None if outcome is None else outcome == "success",
        forks=None if forks is None else forks == "only",
    )


def run_query(params: Mapping[str, str]) -> RunQuery:
    """The runs page's query (filters, search, sort, page) from URL parameters."""
    wanted = params.get("sort") or "created"
    sort: SortKey | None = next((k for k in get_args(SortKey) if k == wanted), None)
    if sort is None:
        raise UserError(f"cannot sort by '{wanted}'; use one of {', '.join(get_args(SortKey))}")
    direction = params.get("dir") or "desc"
    if direction not in ("asc", "desc"):
        raise UserError(f"dir must be 'asc' or 'desc', got '{direction}'")
    try:
        return RunQuery(
            filter=run_filter(params),
            q=(params.get("q") or "").strip() or None,
            sort=sort,
            descending=direction == "desc",
            page=whole(params, "page", 1, low=1, high=MAX_PAGE),
            per_page=whole(params, "per_page", 50, low=1, high=MAX_PER_PAGE),
        )
    except ValidationError as exc:
        raise UserError(f"cannot read this page's parameters: {exc.errors()[0]['msg']}") from None


def state(params: Mapping[str, str], **changes: object) -> dict[str, object]:
    """The page's URL parameters with some changed (for links that keep everything else)."""
    kept: dict[str, object] = {k: v for k, v in params.items() if k != "token"}
    kept.update(changes)
    return kept

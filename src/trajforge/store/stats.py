"""Counts, success rates and distributions over stored trajectories."""

from __future__ import annotations

from collections import defaultdict
from statistics import median, quantiles
from typing import Any

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.parquet import RunRows
from trajforge.store.sqlite import TrajectoryRow


def _group(rows: list[TrajectoryRow], key: str) -> list[dict[str, Any]]:
    groups: dict[str, list[TrajectoryRow]] = defaultdict(list)
    for row in rows:
        groups[getattr(row, key) or "unknown"].append(row)
    return [
        _counts(rows_in_group) | {"name": name}
        for name, rows_in_group in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]


def _counts(rows: list[TrajectoryRow]) -> dict[str, Any]:
    judged = [r for r in rows if r.success is not None]
    successes = sum(1 for r in judged if r.success)
    return {
        "total": len(rows),
        "successes": successes,
        "judged": len(judged),
        "success_rate": round(successes / len(judged), 4) if judged else None,
        "model_errors": sum(1 for r in rows if r.status == "model_error"),
    }


def distribution(values: list[int]) -> dict[str, float] | None:
    """count / min / median / p90 / max / mean of a list of numbers (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "min": ordered[0],
        "median": median(ordered),
        "p90": quantiles(ordered, n=10, method="inclusive")[-1] if len(ordered) > 1 else ordered[0],
        "max": ordered[-1],
        "mean": round(sum(ordered) / len(ordered), 2),
    }


def compute_stats(source: RunRows, flt: TrajectoryFilter | None = None) -> dict[str, Any]:
    """The stats report as one JSON-ready dict (of the store, or of Parquet shards)."""
    rows = source.rows(flt)
    tokens = [r.total_tokens for r in rows if r.total_tokens is not None]
    return _counts(rows) | {
        "by_source": _group(rows, "harness"),
        "by_model": _group(rows, "model"),
        "by_environment": _group(rows, "environment"),
        "steps": distribution([r.n_steps for r in rows]),
        "messages": distribution([r.n_messages for r in rows]),
        "tokens": distribution(tokens),
        "steps_by_outcome": {
            "success": distribution([r.n_steps for r in rows if r.success]),
            "failure": distribution([r.n_steps for r in rows if r.status == "failure"]),
        },
    }

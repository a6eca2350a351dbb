"""Counts, success rates and distributions over stored trajectories.

The report is made in one pass over the summary rows, holding counts rather than rows: per
group, and per distinct value of each distribution (exact medians and percentiles from how
often each value occurs), so its memory does not grow with the number of runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.parquet import RunRows
from trajforge.store.sqlite import TrajectoryRow


@dataclass
class _Tally:
    """Outcome counts of a set of runs."""

    total: int = 0
    successes: int = 0
    judged: int = 0
    model_errors: int = 0

    def add(self, success: bool | None, status: str) -> None:
        self.total += 1
        if success is not None:
            self.judged += 1
            self.successes += success
        self.model_errors += status == "model_error"

    def report(self) -> dict[str, Any]:
        rate = round(self.successes / self.judged, 4) if self.judged else None
        return {
            "total": self.total,
            "successes": self.successes,
            "judged": self.judged,
            "success_rate": rate,
            "model_errors": self.model_errors,
        }


_GROUPS = {"by_source": "harness", "by_model": "model", "by_environment": "environment"}
"""Each report's list of groups, and the row field that names a run's group."""


@dataclass
class _Report:
    """What the stats report counts, filled a row at a time."""

    runs: _Tally = field(default_factory=_Tally)
    groups: defaultdict[str, dict[str, _Tally]] = field(default_factory=lambda: defaultdict(dict))
    values: defaultdict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, row: TrajectoryRow) -> None:
        status = row.status
        self.runs.add(row.success, status)
        for name, key in _GROUPS.items():
            group = getattr(row, key) or "unknown"
            self.groups[name].setdefault(group, _Tally()).add(row.success, status)
        self.values["steps"][row.n_steps] += 1
        self.values["messages"][row.n_messages] += 1
        if row.total_tokens is not None:
            self.values["tokens"][row.total_tokens] += 1
        if row.success:
            self.values["steps_success"][row.n_steps] += 1
        if status == "failure":
            self.values["steps_failure"][row.n_steps] += 1

    def report(self) -> dict[str, Any]:
        def spread(name: str) -> dict[str, float] | None:
            return distribution(self.values[name])

        by_group = {name: _ranked(self.groups[name]) for name in _GROUPS}
        return (
            self.runs.report()
            | by_group
            | {
                "steps": spread("steps"),
                "messages": spread("messages"),
                "tokens": spread("tokens"),
                "steps_by_outcome": {
                    "success": spread("steps_success"),
                    "failure": spread("steps_failure"),
                },
            }
        )


def _ranked(groups: dict[str, _Tally]) -> list[dict[str, Any]]:
    """Each group's counts and name, the largest first (ties in order of first appearance)."""
    ordered = sorted(groups.items(), key=lambda kv: -kv[1].total)
    return [tally.report() | {"name": name} for name, tally in ordered]


def distribution(counts: Counter[int]) -> dict[str, float] | None:
    """count / min / median / p90 / max / mean of numbers given as value -> how often (None
    when there are none); the median and p90 as `statistics.median` and `quantiles(n=10,
    method="inclusive")` give them for the list of those numbers."""
    n = counts.total()
    if not n:
        return None
    ordered = sorted(counts.items())
    middle = _nth(ordered, [n // 2 - 1, n // 2]) if n % 2 == 0 else _nth(ordered, [n // 2])
    j, delta = divmod(9 * (n - 1), 10)  # quantiles' inclusive method at 9/10
    low, high = _nth(ordered, [j, min(j + 1, n - 1)])
    return {
        "count": n,
        "min": ordered[0][0],
        "median": sum(middle) / 2 if len(middle) == 2 else middle[0],
        "p90": (low * (10 - delta) + high * delta) / 10 if n > 1 else low,
        "max": ordered[-1][0],
        "mean": round(sum(value * times for value, times in ordered) / n, 2),
    }


def _nth(ordered: list[tuple[int, int]], positions: list[int]) -> list[int]:
    """The values at ascending 0-based `positions` of the sorted list that `ordered`
    ((value, how often) by value) stands for."""
    found: list[int] = []
    seen = 0
    for value, times in ordered:
        seen += times
        while len(found) < len(positions) and positions[len(found)] < seen:
            found.append(value)
        if len(found) == len(positions):
            break
    return found


def compute_stats(source: RunRows, flt: TrajectoryFilter | None = None) -> dict[str, Any]:
    """The stats report as one JSON-ready dict (of the store, or of Parquet shards)."""
    report = _Report()
    for row in source.iter_rows(flt):
        report.add(row)
    return report.report()

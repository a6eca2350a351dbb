"""`ls`, `ls --json` and `stats` read the summary rows as a stream: their output is what
the whole list gave, and their memory does not grow with the number of runs."""

from __future__ import annotations

import contextlib
import io
import os
import random
import statistics
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from trajforge.cli import browse, common
from trajforge.store import TrajectoryRow
from trajforge.store.stats import compute_stats, distribution


def _rows(count: int, seed: int = 0) -> Iterator[TrajectoryRow]:
    rng = random.Random(seed)
    for k in range(count):
        yield TrajectoryRow(
            id=f"run-{k:08d}",
            harness=rng.choice(["tau-bench", "swe-agent", None]),
            model=rng.choice(["gpt-4o", "claude", None]),
            run=None,
            environment=rng.choice(["tau-retail", "swe", None]),
            task_id=f"task-{rng.randrange(500)}",
            success=rng.choice([True, False, None]),
            reward=None,
            n_messages=rng.randrange(2, 200),
            n_steps=rng.randrange(0, 80),
            total_tokens=rng.choice([None, rng.randrange(500)]),
            parent_id=None,
            fork_index=None,
            format="trajforge",
            source_file=None,
            termination_reason=rng.choice([None, "model_error", "max_steps"]),
        )


class _Rows:
    """A source of `count` made-up summary rows, made as they are read."""

    def __init__(self, count: int) -> None:
        self.count = count

    def iter_rows(self, flt: object = None) -> Iterator[TrajectoryRow]:
        return _rows(self.count)


def _peak_bytes(work: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _drain(lines: Iterator[str]) -> None:
    for _ in lines:
        pass


def _print_items(count: int) -> None:
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
        common.print_json_items(map(browse._row_json, _rows(count)))


@pytest.mark.parametrize(
    "listing",
    [
        lambda count: _drain(browse._plain_rows(_rows(count))),
        lambda count: compute_stats(_Rows(count)),
        _print_items,
    ],
    ids=["ls", "stats", "ls --json"],
)
def test_memory_does_not_grow_with_the_number_of_runs(listing) -> None:
    """(`stats` holds a count per distinct value of each distribution: the made-up runs have
    at most 500 token counts.)"""
    small = _peak_bytes(lambda: listing(2_000))
    large = _peak_bytes(lambda: listing(40_000))
    assert large < 2 * small + 200_000, (small, large)  # holding the rows would be 20x


def test_a_long_listing_aligns_every_line_to_the_widest_cell() -> None:
    rows = list(_rows(500))
    lines = list(browse._plain_rows(iter(rows)))
    assert lines[-1] == "500 trajectories\n"
    cells = [browse._COLUMNS, *map(browse._row_cells, rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(browse._COLUMNS))]
    for line, row_cells in zip(lines[:-1], cells, strict=True):
        expected = "  ".join(c.ljust(w) for c, w in zip(row_cells, widths, strict=True))
        assert line == expected.rstrip() + "\n"


@pytest.mark.parametrize(
    "items",
    [[], [{}], [[]], [{"a": 1}], [{"a": [1, {"b": "x\ny"}], "c": None}, 3, "s"], ["caf\udce9"]],
)
def test_json_items_print_the_text_of_the_whole_list(
    items: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed = {}
    for name, print_out in [("list", common.print_json), ("items", common.print_json_items)]:
        out = io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        print_out(iter(items) if name == "items" else items)
        printed[name] = out.getvalue()
    assert printed["items"] == printed["list"]


def test_distributions_from_counts_match_the_statistics_module() -> None:
    rng = random.Random(7)
    for _ in range(3_000):
        n = rng.choice([1, 2, 3, 4, 5, 10, 11, 20, 21, rng.randrange(1, 300)])
        values = [rng.choice([rng.randrange(6), rng.randrange(10**6)]) for _ in range(n)]
        got = distribution(Counter(values))
        assert got is not None
        p90 = statistics.quantiles(values, n=10, method="inclusive")[-1] if n > 1 else values[0]
        expected = {
            "count": n,
            "min": min(values),
            "median": statistics.median(values),
            "p90": p90,
            "max": max(values),
            "mean": round(sum(values) / n, 2),
        }
        assert got == expected
        assert [type(got[k]) for k in expected] == [type(v) for v in expected.values()]
    assert distribution(Counter()) is None

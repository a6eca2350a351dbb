"""UI speed: server time of the runs page, a search and a run view on a store of >= 30,000 runs,
each against the bare SQL it needs, measured in the same run.

Usage: python bench/ui_speed.py [DATA_DIR] [--store PATH] [--repeat N]

The store: every run of ../shared/data imported, then copied with new ids (the copies are the
same documents, so the full-text index and the pages see real text). SWE-bench runs are ~8x
larger than the others (195 KB against 20-36 KB), so they are copied 4 times and the other
runs 47 times: about 30,400 runs and 2 GB with the data as it is now. `--store PATH` keeps
it for the next run.

Server time is the app's own `Server-Timing` header (from the request reaching the app to the
response being ready; the in-process test client adds no network). The SQL side runs the
exact statements the page runs (`page_statements`, `run_view_statements`) on the same store
connection. Each side runs `--repeat` times alternately and the median counts.

Goals: first page and search within 3x of their SQL; the run view of a run with >= 200
messages under 100 ms of server time (its risk curve is a fragment loaded after the page
and is reported on its own line).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from fastapi.testclient import TestClient

from shared_data import data_dir
from trajforge.importers import import_paths
from trajforge.store import EncodedTrajectory, Store, TrajectoryFilter, encode
from trajforge.store.runs import (
    RunQuery,
    page_statements,
    run_statements,
    run_view_statements,
)
from trajforge.web import UiConfig, create_app

TARGET_RUNS = 30_000
SWE_COPIES, OTHER_COPIES = 4, 47
PAGE_GOAL, RUN_VIEW_GOAL_MS = 3.0, 100.0
SEARCHES = ("reservation", '"Chinese zodiac"')
"""A common word (thousands of runs match) and a rare phrase."""


def build_store(db: Path, data: Path) -> None:
    """Import the real data, then add copies with new ids (same documents otherwise)."""
    with Store(db) as store:
        import_paths(store, [str(data)])
        originals = [encode(traj) for traj in store.query()]
        for copy in range(1, max(SWE_COPIES, OTHER_COPIES) + 1):
            with store.transaction():
                for original in originals:
                    swe = original.row[2] == "mini-swe-agent"
                    if copy <= (SWE_COPIES if swe else OTHER_COPIES):
                        store.add_encoded(_copy(original, copy))
        print(f"store: {store.count()} runs in {db} ({db.stat().st_size / 1e9:.2f} GB)")


def _copy(original: EncodedTrajectory, copy: int) -> EncodedTrajectory:
    new_id = f"{original.id[:14]}c{copy:05d}"
    old_head = b'"id":"' + original.id.encode() + b'"'
    document = original.document.replace(old_head, b'"id":"' + new_id.encode() + b'"', 1)
    return EncodedTrajectory((new_id, *original.row[1:]), document)


def server_ms(client: TestClient, path: str) -> float:
    response = client.get(path)
    response.raise_for_status()
    return float(response.headers["server-timing"].split("dur=")[1])


def sql_ms(store: Store, statements: list) -> float:
    start = time.perf_counter()
    run_statements(store, statements)
    return (time.perf_counter() - start) * 1000


def measure(name: str, client: TestClient, store: Store, path: str, statements: list, repeat: int):
    server, sql = [], []
    for _ in range(repeat):
        server.append(server_ms(client, path))
        sql.append(sql_ms(store, statements))
    s, q = statistics.median(server), statistics.median(sql)
    print(f"{name:<24} server {s:8.2f} ms   SQL {q:8.2f} ms   ratio {s / q:5.2f}x   ({path})")
    return s, q


def _search_path(q: str) -> str:
    return "/?" + urlencode({"q": q})


def long_run(store: Store) -> str:
    """A run with at least 200 messages (the shortest such)."""
    rows = [
        r for r in store.rows(TrajectoryFilter(harness="mini-swe-agent")) if r.n_messages >= 200
    ]
    if not rows:
        sys.exit("no run with 200 messages in the data")
    return min(rows, key=lambda r: r.n_messages).id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=None)
    parser.add_argument("--store", type=Path, default=None, help="Keep (or reuse) the store here.")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.store or Path(tmp) / "ui-speed.db"
        if not db.exists():
            started = time.perf_counter()
            build_store(db, data_dir(args.data))
            print(f"built in {time.perf_counter() - started:.0f} s")
        run(db, args.repeat)


def run(db: Path, repeat: int) -> None:
    client = TestClient(create_app(UiConfig(db=db)))
    with Store(db) as store:
        total = store.count()
        if total < TARGET_RUNS:
            sys.exit(f"the store has {total} runs, fewer than {TARGET_RUNS}")
        first = page_statements(store, RunQuery())
        searches = {q: page_statements(store, RunQuery(q=q)) for q in SEARCHES}
        long_id = long_run(store)
        n_messages = len(store.get(long_id).messages)
        view = run_view_statements(store, long_id)
        print(f"{total} runs; run view of {long_id} ({n_messages} messages)")
        for path in ("/", *(_search_path(q) for q in SEARCHES), f"/runs/{long_id}"):
            server_ms(client, path)  # warm caches once
        page = measure("runs page (first page)", client, store, "/", first, repeat)
        found = [
            measure(f"search {q}", client, store, _search_path(q), statements, repeat)
            for q, statements in searches.items()
        ]
        viewed = measure("run view", client, store, f"/runs/{long_id}", view, repeat)
        risk = statistics.median(server_ms(client, f"/runs/{long_id}/risk") for _ in range(5))
        print(f"{'risk curve fragment':<24} server {risk:8.2f} ms (loaded after the run view)")
    verdicts = [
        ("first page <= 3x SQL", page[0] / page[1] <= PAGE_GOAL),
        ("searches <= 3x SQL", all(s / q <= PAGE_GOAL for s, q in found)),
        ("run view < 100 ms", viewed[0] < RUN_VIEW_GOAL_MS),
    ]
    for goal, met in verdicts:
        print(f"goal {goal}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()

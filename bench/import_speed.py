"""Import speed: all of ../shared/data into a temporary store, against plain `json.load`.

Usage: python bench/import_speed.py [DATA_DIR]   (or $TRAJFORGE_SHARED_DATA, or
../shared/data beside the repository). Prints throughput (MB/s, trajectories/s) and the
ratio of the import's time to `json.load` of the same files (those imported and the
companion files they consume), measured in the same run. Goal: ratio at most 3.

Each side runs `--repeat` times (default 3) and the fastest run counts, so a busy machine
disturbs the ratio less. `--profile` prints the top functions of one import.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import tempfile
import time
from pathlib import Path

from trajforge.importers import ImportReport, import_paths
from trajforge.importers.base import open_binary
from trajforge.store import Store

GOAL_RATIO = 3.0
REPO = Path(__file__).resolve().parents[1]


def data_dir(argument: str | None) -> Path:
    path = Path(
        argument or os.environ.get("TRAJFORGE_SHARED_DATA") or REPO.parent / "shared" / "data"
    )
    if not path.is_dir():
        raise SystemExit(f"no data folder at {path}; pass DATA_DIR or set TRAJFORGE_SHARED_DATA")
    return path


def timed_import(data: Path) -> tuple[float, ImportReport]:
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.db") as store:
        start = time.perf_counter()
        report = import_paths(store, [str(data)])
        elapsed = time.perf_counter() - start
    if report.failed:
        raise SystemExit(f"import failed: {report.failed[0].error}")
    return elapsed, report


def timed_json_load(files: list[Path]) -> float:
    start = time.perf_counter()
    for path in files:
        with open_binary(path) as handle:
            json.load(handle)
    return time.perf_counter() - start


def read_files(report: ImportReport) -> list[Path]:
    """The files the import parsed: trajectory files and consumed companion files."""
    return [Path(f.path) for f in report.files] + [Path(p) for p in report.sidecars]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="folder to import (default: ../shared/data)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; the best counts")
    parser.add_argument("--profile", action="store_true", help="profile one import")
    args = parser.parse_args()
    data = data_dir(args.data)
    if args.profile:
        cProfile.runctx("timed_import(data)", globals(), {"data": data}, "/tmp/import.prof")
        pstats.Stats("/tmp/import.prof").sort_stats("tottime").print_stats(25)
    import_s, report = min((timed_import(data) for _ in range(args.repeat)), key=lambda r: r[0])
    files = read_files(report)
    json_s = min(timed_json_load(files) for _ in range(args.repeat))
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    ratio = import_s / json_s
    print(f"data: {data} ({len(files)} files parsed, {megabytes:.1f} MB)")
    print(
        f"import:    {import_s:6.2f} s  {megabytes / import_s:6.1f} MB/s  "
        f"{report.added / import_s:6.1f} trajectories/s  ({report.added} trajectories)"
    )
    print(f"json.load: {json_s:6.2f} s  {megabytes / json_s:6.1f} MB/s")
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(f"ratio import / json.load: {ratio:.2f}x (goal <= {GOAL_RATIO:g}x: {verdict})")


if __name__ == "__main__":
    main()

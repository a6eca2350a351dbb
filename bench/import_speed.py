"""Import speed: all of ../shared/data into a temporary store, against plain `json.load`.

Usage: python bench/import_speed.py [DATA_DIR]   (or $TRAJFORGE_SHARED_DATA, or
../shared/data beside the repository). Prints throughput (MB/s, trajectories/s) and the
ratio of the import's time to `json.load` of the same files (those imported and the
companion files they consume), measured in the same run. Goal: ratio at most 3.

The two sides run alternately `--repeat` times (default 3) and each side's fastest run
counts, so a busy machine disturbs the ratio less; the ratio of CPU time (process time,
which other processes do not inflate; the import's workers included) is printed too.
`--profile` prints the top functions of one import (of its main process).

Where the time goes in one process (`--workers 0`; process-time timers around each stage, 986
trajectories, 99 MB of files, on a busy 2-core machine; about 1.45-1.8 s of CPU in all):
reading, parsing and one pydantic validation per trajectory about 0.5 s (json.load of the same
bytes: 0.23 s); SQLite's full-text index (FTS5) of the runs' 44 MB of text about 0.4 s, which
alone is about twice json.load; one serialization plus sha256 for the content id, and the
search text, about 0.3 s; row inserts 0.15 s; commits 0.12 s; format detection 0.14 s. What the
import does about SQLite: files are committed in groups of about 8 MB (each file in its own
savepoint), the full-text rows of a group are written just before its commit (FTS5 writes out a
segment at every savepoint, which cost more than the indexing itself when each file was its
own), and an empty store is filled through a rollback journal, so each page is written once
instead of to the write-ahead log and again at the checkpoint. Files are read, validated and
serialized by worker processes (one per core but one) while the main process writes the store
(`--workers 0` reads everything in the main process): on 2 cores 1.09-1.1 s instead of 1.5-1.7
s wall (5.0-5.1x instead of 7.1-7.5x), at more CPU in all (7.8-8.1x instead of 6.5-7.0x) since
the encoded runs (about 130 MB for 99 MB of files) are pickled and sent through a pipe. The
main process is then the limit: SQLite takes about 0.85 s of it (the full-text index 0.5-0.6 s,
rows 0.26 s), receiving the runs 0.12 s and format detection 0.13 s, which is already 5x
json.load. Tried and not kept: page_size 16 KiB / 64 KiB with a larger cache (no faster, the
file grows up to 10%); zlib level 1 (4.6x smaller file, same wall time, +0.3 s CPU, and SQL
`json_extract` on documents would stop working); a writer thread for SQLite (GIL hand-offs
between ~1000 small transactions and long validations: 4.9 s against 4.2 s on a busy 2-core
machine); FTS5 `detail=column` (0.27 s instead of 0.42 s to index, but no phrase queries) and
the ascii tokenizer (about 5% faster, but non-ASCII text would not be folded); the main process
reading pieces queued for the worker whenever it would wait for one (work stealing: 82 pieces,
0.33 s, replacing 0.26 s of waiting on a quiet machine, 3.66 s against 3.54 s a run: the waits
are the first pieces', and the main process is busy the rest of the time); format detection
shared with a worker (every second file of a folder of 256 files or more, the worker sending
back format names): deciding the importers of the 933 files took 0.15 s instead of 0.18, and
the import was no faster that one could tell (1.45-1.68 s against 1.55-1.65 s in alternating
runs). Indexing the runs' 44 MB of text alone, replayed into an empty FTS5 table (CPU, best of
three, 0.63-0.69 s against 0.33 s for json.load on the same busy machine): the `hashsize` (16
MB), `automerge` (0, or 8 with `crisismerge` 64) and `pgsz` (8000) options, segments flushed
every 1 MB, 4 MB or 8 MB of text, commits of 32 MB, and no `DELETE` before each insert all land
within 0.58-0.69 s, the spread of repeated runs: the cost is tokenizing, not merging or
flushing. So moving the index to a second database file written by its own process would not
reach 3x on 2 cores either: the CPU of the whole import, workers included, is 6.8-7.1x
json.load, and on 2 cores wall time cannot fall below half of it (3.4-3.6x) however the work is
split.

The workers hand their runs back through files (`processes.Spool`), not the pool's pipe:
through the pipe, a worker that had encoded a part waited until the main process had read all
of it, 64 KB at a time on the pool's thread, which had to take the GIL from the busy writer
for each. In paired whole-command runs (eight each) that made importing one 100 MB JSONL copy
of the shared data 0.87x the time (0.91x the CPU, peak RSS 105 MB instead of 114), these files
0.95x (a spread of 0.87-1.14) and ten copies no faster (there the writer is the limit).
Profiled at ten copies (1 GB), the writer's 13.9 s were 9.9 s writing the full-text index,
1.9 s inserting rows, 0.8 s taking the workers' results and 0.5 s committing; the FTS5
`automerge` 8, `crisismerge` 64 and `hashsize` 16 MB options together were 3% faster in six
alternating pairs of such imports, within their spread, and at thirty copies 38.4 s against
40.0 s (means of two alternating pairs, each pair's order swapped), within it too."""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from shared_data import data_dir
from trajforge.importers import ImportReport, import_paths
from trajforge.importers.base import open_binary
from trajforge.store import Store

GOAL_RATIO = 3.0


def cpu_seconds() -> float:
    """CPU time of this process and of its ended worker processes."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Timing:
    """Best wall-clock and CPU seconds over repeated runs."""

    def __init__(self) -> None:
        self.wall = float("inf")
        self.cpu = float("inf")

    def measure(self, func, *args):
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = func(*args)
        self.wall = min(self.wall, time.perf_counter() - wall)
        self.cpu = min(self.cpu, cpu_seconds() - cpu)
        return result


def import_all(data: Path, store_path: Path, workers: int | None) -> ImportReport:
    """Import `data` into a new store at `store_path` (closing it, which syncs it to disk)."""
    with Store(store_path) as store:
        report = import_paths(store, [str(data)], workers=workers)
    for failed in report.failed:  # the shared data may hold a file the importer refuses
        print(f"not imported (still timed on both sides): {failed.error}", file=sys.stderr)
    return report


def timed_import(timing: Timing, data: Path, workers: int | None) -> ImportReport:
    """One measured import into a fresh temporary store (deleting it is not measured)."""
    with tempfile.TemporaryDirectory() as tmp:
        return timing.measure(import_all, data, Path(tmp) / "bench.db", workers)


def json_load_all(files: list[Path]) -> None:
    """Parse every file as plain JSON: a JSONL file line by line, an Inspect `.eval` (a zip)
    member by member, a Harbor `reward.txt` as the number it holds."""
    for path in files:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    json.loads(archive.read(name))
            continue
        with open_binary(path) as handle:
            if path.name.endswith((".jsonl", ".jsonl.gz", ".txt")):
                for line in handle:
                    if line.strip():
                        json.loads(line)
            else:
                json.load(handle)


def read_files(report: ImportReport) -> list[Path]:
    """The files the import parsed: trajectory files and consumed companion files."""
    return [Path(f.path) for f in report.files] + [Path(p) for p in report.sidecars]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="folder to import (default: ../shared/data)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; the best counts")
    parser.add_argument(
        "--workers", type=int, help="reading workers (default: the import's own default)"
    )
    parser.add_argument("--profile", action="store_true", help="profile one import")
    args = parser.parse_args()
    data = data_dir(args.data)
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            call = "import_all(data, Path(tmp) / 'bench.db', workers)"
            where = {"data": data, "tmp": tmp, "workers": args.workers}
            cProfile.runctx(call, globals(), where, "/tmp/import.prof")
        pstats.Stats("/tmp/import.prof").sort_stats("tottime").print_stats(25)
    importing, loading = Timing(), Timing()
    report = timed_import(importing, data, args.workers)
    files = read_files(report)
    for run in range(args.repeat):
        loading.measure(json_load_all, files)
        if run:
            timed_import(importing, data, args.workers)
    print_results(data, report, files, importing, loading)


def print_results(
    data: Path, report: ImportReport, files: list[Path], importing: Timing, loading: Timing
) -> None:
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    ratio = importing.wall / loading.wall
    print(f"data: {data} ({len(files)} files parsed, {megabytes:.1f} MB)")
    print(
        f"import:    {importing.wall:6.2f} s  {megabytes / importing.wall:6.1f} MB/s  "
        f"{report.added / importing.wall:6.1f} trajectories/s  ({report.added} trajectories)"
    )
    print(f"json.load: {loading.wall:6.2f} s  {megabytes / loading.wall:6.1f} MB/s")
    print(
        f"CPU time (workers included): import {importing.cpu:.2f} s, "
        f"json.load {loading.cpu:.2f} s, "
        f"ratio {importing.cpu / loading.cpu:.2f}x"
    )
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(f"ratio import / json.load: {ratio:.2f}x (goal <= {GOAL_RATIO:g}x: {verdict})")


if __name__ == "__main__":
    main()

"""Store scale: the CLI and the web UI on 1x to 100x copies of the real runs.

Usage: python bench/store_scale.py [DATA_DIR] [--scales 1,10,30,100] [--repeat N]
       [--repeat-large N] [--against SRC] [--json] [--out FILE] [--work DIR]

Imports ../shared/data once, exports it, and writes copies of every run with new ids (copy K's
runs get the run name "<run>~copyK", so their content ids differ) as trajforge JSONL files, one
file per copy (about 100 MB each; 100x is about 10 GB, written once into the temporary folder,
or `--work`, before any import is measured, and flushed to disk, so that no import competes
with their write-back; the smaller scales import the first copies). At each scale the copies
are imported into a fresh store with `trajforge import`, then every command runs as a whole
process: `ls`, `ls --json`, a filtered `ls`, two full-text searches (`ls --search`, a common
word and a rare phrase), `stats`, `show` (of the same run at every scale), `export` to JSONL
and to Parquet (shards of 20,000 runs; one file with `--against`'s older tree), and `ls`,
`stats` and the searches read from the shards (`--parquet DIR`, DuckDB). The web UI
(`trajforge ui`, a real server on loopback) serves its first page and a search.

Each measure has its yardstick, measured in the same run on the same store:
- import: time per GB of input (goal: flat within 20% from 1x to 100x) and `json.loads` of
  the same lines (scaled from the first copy file); peak RSS of the import's process tree
  (sampled from /proc every 0.2 s; goal <= 1 GB) and of its largest process (getrusage).
  Beside it, the time per GB past the fixed cost of an import (the import of a file of one
  run, measured first), which weighs most at 1x (0.1 GB);
- `ls`, the filtered `ls`, the searches, `stats`: the SQL they run, fetched by sqlite3 in this
  process (`ls` also against `ls --json`, goal within 2x);
- `show`: reading its document by id;
- the exports: copying the store file's bytes (JSONL goal: within 2x; Parquet peak RSS goal:
  at most 200 MB);
- the web pages: the SQL statements the page runs (`page_statements`);
- the Parquet-backed commands: the same commands on the SQLite store.

Medians of `--repeat` runs (default 3) at scales below 10x, of `--repeat-large` (default 1)
from 10x, the imports' included (each into a fresh store). Progress lines go to stderr.
`--against SRC` runs the commands with a second source tree (for example an older
checkout's `src`) on its own store, and prints new / old per row.

On a 2-core AMD EPYC with AVX-512 and 23 GB of memory (`results/store_scale.json`): import time
per GB 16.1, 12.3, 14.0 and 17.3 s from 1x to 100x (1.41 max over min; past the fixed cost of
0.31 s, 1.44), the import's process tree at most 162 MB, and `ls`, `ls --json` and `stats` at
most 40 MB at every scale since they stream their rows (at 100x `ls` took 170 MB and `stats` 129
MB when they held them). The machine was slower during the 100x part of that run: `json.loads`
of the same lines took 47.5 s there against 36.4 s in the run before, whose figures on the same
import code were 19.3, 14.2, 12.8 and 14.6 s (1.50), and in one before that 14.9, 15.1, 13.7 and
14.6 s (1.11): the machine's speed moves every figure. An earlier run, before the workers handed
their results back through files and big files were cut without being read first: 22.2, 13.6,
16.9 and 17.2 s (1.63), peaks up to 239 MB. With the document the last column of a row, `ls` at
100x takes 1.92 s and `stats` 1.11 s (4.53 s and 2.94 s in the run before, when reaching
`termination_reason` meant reading each document). The copy of the store file that the exports
are held against is itself unsteady (at 10x 0.45, 0.49, 1.65 and 2.19 s in four runs; at 100x
16.3-20.6 s), so the export ratios mean most at 30x and 100x: JSONL 2.38x and 2.49x in the last
run, 1.81-1.96x and 1.97-2.12x in the two before, on the same export code. Where 100x went
before the workers' result files and the cuts found by seeking, from timers around each copy of
an import in one process (twelve runs): the writer's user CPU a copy stays flat within a run,
its system CPU about doubles for the copies between about the 50th and the 80th (0.33-0.4 to
0.6-1.1 s), then falls back. In a profile of that stretch, writing pages (`pwrite64`) takes 30%
of the writer's time, partial pages among them (probably the rollback journal, whose records are
not page-aligned), and `line_ranges` reading each copy before a worker read it again 10% (it now
reads only around each cut). No page was reclaimed from the cache until about the 80th copy;
from there the store and the copies no longer fit in memory together, and dropping each copy
from the cache once read (`forget_cached`) made 100x imports 0-24 s faster in four pairs of runs
(median about 8 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from shared_data import REPO, data_dir

HERE_SRC = REPO / "src"
sys.path.insert(0, str(HERE_SRC))

from trajforge.store import Store, TrajectoryFilter  # noqa: E402
from trajforge.store.runs import RunQuery, page_statements, run_statements  # noqa: E402

FILTER = ("--outcome", "failure", "--env", "tau-airline")
SEARCHES = {"search word": "reservation", "search phrase": '"Chinese zodiac"'}
"""A common word (most airline and retail runs) and a rare phrase."""
SHARD_ROWS = 20_000
ROW_FIELDS = (
    "id, harness, model, run, environment, task_id, success, reward, n_messages, n_steps, "
    "total_tokens, parent_id, fork_index, format, source_file, termination_reason"
)
COPY_MARK = b"@@COPY@@"


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class TreeRss:
    """Peak resident memory of a process and all its descendants, sampled from /proc: the
    largest sum of their RSS, and the largest peak (VmHWM) of any one of them. (getrusage's
    ru_maxrss of a child would count the benchmark's own memory, which the child holds
    between fork and exec.)"""

    def __init__(self, pid: int, every: float = 0.2, report: Callable[[float], None] | None = None):
        self.pid, self.every, self.report = pid, every, report
        self.tree_mb = self.largest_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        last_report = time.monotonic()
        while not self._stop.wait(self.every):
            total, largest = _tree_rss_mb(self.pid)
            self.tree_mb, self.largest_mb = max(self.tree_mb, total), max(self.largest_mb, largest)
            if self.report and time.monotonic() - last_report > 30:
                self.report(self.tree_mb)
                last_report = time.monotonic()


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    return children


def _tree_rss_mb(pid: int) -> tuple[float, float]:
    """(sum of the tree's RSS, largest VmHWM in it), in MB."""
    children, total, largest, todo = _children_of(), 0, 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            status = Path(f"/proc/{current}/status").read_text().splitlines()
        except OSError:
            continue
        fields = {line.split(":")[0]: line.split()[1] for line in status if line.startswith("Vm")}
        total += int(fields.get("VmRSS", 0))
        largest = max(largest, int(fields.get("VmHWM", 0)))
    return total / 1024, largest / 1024


class Tree:
    """One source tree of trajforge, run as `python -m trajforge` with its own store."""

    def __init__(self, name: str, src: Path, work: Path) -> None:
        self.name, self.src, self.work = name, src, work

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(self.src))

    def run(self, *args: str, label: str = "") -> list[float]:
        """Run one command; returns [wall s, CPU s (its waited-for children's included), peak
        RSS MB of its largest process, peak RSS MB of its process tree]."""
        log = self.work / "stderr.log"
        with open(os.devnull, "wb") as sink, log.open("wb") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "trajforge", *args], env=self.env(), stdout=sink,
                stderr=err,
            )  # fmt: skip
            report = _rss_reporter(label, start) if label else None
            with TreeRss(proc.pid, report=report) as tree:
                _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            tail = log.read_text()[-3000:]
            raise SystemExit(f"{self.name}: trajforge {' '.join(args)} failed:\n{tail}")
        return [wall, usage.ru_utime + usage.ru_stime, tree.largest_mb, tree.tree_mb]


def _rss_reporter(label: str, start: float) -> Callable[[float], None]:
    def report(peak_mb: float) -> None:
        progress(f"{label}: {time.perf_counter() - start:.0f} s, peak tree RSS {peak_mb:.0f} MB")

    return report


def _document(line: bytes) -> dict:
    """The trajectory document of an export line (each field but `id` and `format_version`
    as JSON text)."""
    record = orjson.loads(line)
    plain = ("id", "format_version")
    return {
        key: orjson.loads(value) if key not in plain and isinstance(value, str) else value
        for key, value in record.items()
    }


def copy_templates(base_db: Path, work: Path) -> list[bytes]:
    """Each stored run as a JSONL line without id whose run name ends in `~copy@@COPY@@`."""
    exported = work / "base.jsonl"
    Tree("base", HERE_SRC, work).run("export", "--db", str(base_db), "-o", str(exported))
    templates = []
    with exported.open("rb") as lines:
        for line in lines:
            doc = _document(line)
            doc["id"] = ""
            doc["source"]["run"] = f"{doc['source'].get('run') or 'run'}~copy" + "@@COPY@@"
            template = orjson.dumps(doc) + b"\n"
            if template.count(COPY_MARK) != 1:
                raise SystemExit(f"run {line[:80]!r} holds the copy mark; change COPY_MARK")
            templates.append(template)
    exported.unlink()
    return templates


def write_copies(templates: list[bytes], copies: int, folder: Path) -> list[Path]:
    """Copy files 1..`copies` (those already written are kept)."""
    files = []
    for k in range(1, copies + 1):
        path = folder / f"copy-{k:03d}.jsonl"
        if not path.exists():
            mark = str(k).encode()
            with path.open("wb") as out:
                out.writelines(t.replace(COPY_MARK, mark) for t in templates)
            if k % 10 == 0:
                progress(f"wrote copy {k} of {copies}")
        files.append(path)
    return files


def json_loads_seconds(path: Path) -> float:
    """Fastest of three: `json.loads` of every line of one copy file."""
    data = path.read_bytes().splitlines()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for line in data:
            json.loads(line)
        best = min(best, time.perf_counter() - start)
    return best


def raw_seconds(db: Path, sql: str, params: tuple | list = ()) -> float:
    """Wall time of one SQL statement with all its rows fetched (a fresh connection)."""
    connection = sqlite3.connect(db)
    try:
        start = time.perf_counter()
        connection.execute(sql, params).fetchall()
        return time.perf_counter() - start
    finally:
        connection.close()


def rows_sql(where: str = "") -> str:
    return f"SELECT {ROW_FIELDS} FROM trajectories{where} ORDER BY rowid"


def raw_queries(db: Path, some_id: str) -> dict[str, Callable[[], float]]:
    """The SQL each command is built on, by measure name."""
    flt = TrajectoryFilter(success=False, environment="tau-airline")
    where, params = flt.where()
    raws: dict[str, Callable[[], float]] = {
        "ls": lambda: raw_seconds(db, rows_sql()),
        "ls " + " ".join(FILTER): lambda: raw_seconds(db, rows_sql(where), params),
        "stats": lambda: raw_seconds(db, rows_sql()),
        "show": lambda: raw_seconds(db, "SELECT doc FROM trajectories WHERE id = ?", [some_id]),
    }
    for name, q in SEARCHES.items():
        text_where, text_params = TrajectoryFilter(text=q).where()
        raws[name] = lambda w=text_where, p=text_params: raw_seconds(db, rows_sql(w), p)
    return raws


def cli_commands(shards: Path) -> dict[str, list[str]]:
    commands = {
        "ls": ["ls"],
        "ls --json": ["ls", "--json"],
        "ls " + " ".join(FILTER): ["ls", *FILTER],
        **{name: ["ls", "--search", q] for name, q in SEARCHES.items()},
        "stats": ["stats"],
        "show": ["show", "SOME_ID"],
        "export jsonl": ["export", "-f", "jsonl", "-o", "OUT.jsonl"],
        "export parquet": [
            "export", "-f", "parquet", "--shard-rows", str(SHARD_ROWS), "-o", str(shards),
        ],
    }  # fmt: skip
    return commands


PARQUET_COMMANDS = {
    "parquet ls": ["ls"],
    "parquet ls " + " ".join(FILTER): ["ls", *FILTER],
    **{f"parquet {name}": ["ls", "--search", q] for name, q in SEARCHES.items()},
    "parquet stats": ["stats"],
}
"""Commands that read the Parquet shards, and the SQLite measure each compares with."""


def _median_runs(run: Callable[[], list[float]], repeat: int) -> list[float]:
    samples = [run() for _ in range(repeat)]
    return [statistics.median(column) for column in zip(*samples, strict=True)]


def _command_argv(args: list[str], tree: Tree, some_id: str) -> list[str]:
    out = str(tree.work / "out")
    return [a.replace("OUT", out).replace("SOME_ID", some_id) for a in args]


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def measure_import(trees: list[Tree], files: list[Path], dbs: dict[str, Path], repeat: int) -> dict:
    """Each tree's import of `files` into a fresh store, `repeat` times: the median wall and
    CPU seconds, the largest peak RSS (the last run's store is kept for the commands)."""
    results: dict = {}
    for tree in trees:
        samples = []
        for attempt in range(1, repeat + 1):
            label = f"{tree.name} import of {len(files)} files ({attempt}/{repeat})"
            progress(label)
            _remove_store(dbs[tree.name])
            argv = ["import", *map(str, files), "--db", str(dbs[tree.name])]
            samples.append(tree.run(*argv, label=label))
            progress(f"{label}: done in {samples[-1][0]:.0f} s")
        walls, cpus, largest, whole = zip(*samples, strict=True)
        results[tree.name] = [
            statistics.median(walls),
            statistics.median(cpus),
            max(largest),
            max(whole),
        ]
    return results


def measure_fixed_import(tree: Tree, template: bytes, repeat: int) -> float:
    """Median seconds of importing a file of one run: what every import costs whatever its
    size (start-up, opening the store, the report)."""
    one = tree.work / "one-run.jsonl"
    one.write_bytes(template.replace(COPY_MARK, b"0"))
    db = tree.work / "one-run.db"
    walls = []
    for _ in range(repeat):
        _remove_store(db)
        walls.append(tree.run("import", str(one), "--db", str(db))[0])
    _remove_store(db)
    one.unlink()
    return statistics.median(walls)


def _remove_store(db: Path) -> None:
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        path.unlink(missing_ok=True)


def measure_commands(trees: list[Tree], dbs: dict[str, Path], repeat: int, some_id: str) -> dict:
    """{measure: {tree: [wall, cpu, largest RSS, tree RSS]}} of every CLI command."""
    results: dict = {}
    for name, args in cli_commands(trees[0].work / "shards").items():
        for tree in trees:
            shards = str(tree.work / "shards")
            argv = [a.replace(str(trees[0].work / "shards"), shards) for a in args]
            argv = [*_command_argv(argv, tree, some_id), "--db", str(dbs[tree.name])]
            if name == "export parquet" and tree is not trees[0]:
                argv = [a for a in argv if a not in ("--shard-rows", str(SHARD_ROWS))]
                argv[argv.index("-o") + 1] = str(tree.work / "out.parquet")  # one file
            results.setdefault(name, {})[tree.name] = _median_runs(
                lambda t=tree, a=argv: _run_fresh(t, a), repeat
            )
        progress(f"{name}: {results[name][trees[0].name][0]:.2f} s")
    return results


def _run_fresh(tree: Tree, argv: list[str]) -> list[float]:
    """Run a command whose output path is removed first (exports write fresh)."""
    out = argv[argv.index("-o") + 1] if "-o" in argv else None
    if out:
        _remove(Path(out))
    measured = tree.run(*argv)
    if out and "--shard-rows" not in argv:
        _remove(Path(out))
    return measured


def measure_parquet(tree: Tree, repeat: int) -> dict:
    """The commands reading the Parquet shards the export wrote."""
    shards = tree.work / "shards"
    results = {}
    for name, args in PARQUET_COMMANDS.items():
        argv = [*args, "--parquet", str(shards)]
        results[name] = {tree.name: _median_runs(lambda a=argv: tree.run(*a), repeat)}
        progress(f"{name}: {results[name][tree.name][0]:.2f} s")
    _remove(shards)
    return results


def measure_copy(db: Path, work: Path, repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        shutil.copyfile(db, work / "copy.db")
        walls.append(time.perf_counter() - start)
        (work / "copy.db").unlink()
    return statistics.median(walls)


class UiServer:
    """`trajforge ui` on a free loopback port, until the block ends."""

    def __init__(self, tree: Tree, db: Path) -> None:
        self.tree, self.db = tree, db
        self.port = _free_port()

    def __enter__(self) -> UiServer:
        argv = [sys.executable, "-m", "trajforge", "ui", "--db", str(self.db)]
        self.proc = subprocess.Popen(
            [*argv, "--port", str(self.port)], env=self.tree.env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get("/api/runs?per_page=1")
                return self
            except OSError:
                time.sleep(0.2)
        raise SystemExit("trajforge ui did not answer within 120 s")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def get(self, path: str) -> float:
        """Wall seconds of one GET, the whole body read."""
        start = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=120) as page:
            page.read()
        return time.perf_counter() - start


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure_web(tree: Tree, db: Path, repeat: int) -> dict:
    """{page: [server wall s, SQL s]} for the first page and a search."""
    pages = {"web first page": ("/", RunQuery())}
    for name, q in SEARCHES.items():
        pages[f"web {name}"] = ("/?" + urlencode({"q": q}), RunQuery(q=q))
    results = {}
    with UiServer(tree, db) as server, Store(db) as store:
        for name, (path, query) in pages.items():
            server.get(path)  # one warm-up: the server's first read of each page
            statements = page_statements(store, query)
            served, sql = [], []
            for _ in range(max(repeat, 3)):
                served.append(server.get(path))
                start = time.perf_counter()
                run_statements(store, statements)
                sql.append(time.perf_counter() - start)
            results[name] = [statistics.median(served), statistics.median(sql)]
            served_ms, sql_ms = (value * 1000 for value in results[name])
            progress(f"{name}: {served_ms:.0f} ms (SQL {sql_ms:.0f} ms)")
    return results


def measure_scale(trees: list[Tree], files: list[Path], repeat: int, last: bool) -> dict:
    """Every measure at one scale (the input files are deleted after the import when `last`)."""
    dbs = {t.name: t.work / f"scale-{len(files)}.db" for t in trees}
    input_bytes = sum(f.stat().st_size for f in files)
    loads = json_loads_seconds(files[0]) * input_bytes / files[0].stat().st_size
    imports = measure_import(trees, files, dbs, repeat)
    if last:
        for path in files:
            path.unlink()
    some_id = _first_id(dbs[trees[0].name])
    main = trees[0]
    report = {
        "input_gb": input_bytes / 1e9,
        "store_gb": dbs[main.name].stat().st_size / 1e9,
        "json_loads_s": loads,
        "import": imports,
        "commands": measure_commands(trees, dbs, repeat, some_id),
    }
    report["commands"] |= measure_parquet(main, repeat)
    raws = raw_queries(dbs[main.name], some_id)
    report["raw_s"] = {name: statistics.median(r() for _ in range(3)) for name, r in raws.items()}
    report["copy_store_file_s"] = measure_copy(dbs[main.name], main.work, repeat)
    report["web"] = measure_web(main, dbs[main.name], repeat)
    for db in dbs.values():
        db.unlink()
    return report


def _first_id(db: Path) -> str:
    """The run `show` reads: the same one at every scale (copy 1's tau-bench run with the
    smallest id; copy 1 is the same file at every scale, so its runs keep their ids)."""
    connection = sqlite3.connect(db)
    try:
        sql = "SELECT min(id) FROM trajectories WHERE harness = 'tau-bench' AND run LIKE '%~copy1'"
        return connection.execute(sql).fetchone()[0]
    finally:
        connection.close()


def ratios(report: dict, tree: str) -> dict[str, float]:
    """Each measure's time over its yardstick's."""
    commands, raw = report["commands"], report["raw_s"]
    wall = {name: by_tree[tree][0] for name, by_tree in commands.items() if tree in by_tree}
    found = {name: wall[name] / raw[name] for name in raw if name in wall and raw[name] > 0}
    found["ls / ls --json"] = wall["ls"] / wall["ls --json"]
    copy = report["copy_store_file_s"]
    for name in ("export jsonl", "export parquet"):
        if name in wall:
            found[f"{name} / copy of the store file"] = wall[name] / copy
    for name in PARQUET_COMMANDS:
        sqlite_name = name.removeprefix("parquet ")
        found[f"{name} / sqlite"] = wall[name] / wall[sqlite_name]
    for name, (served, sql) in report["web"].items():
        found[f"{name} / its SQL"] = served / sql
    imported = report["import"][tree][0]
    found["import / json.loads"] = imported / report["json_loads_s"]
    return found


def print_scale(scale: int, report: dict, trees: list[Tree]) -> None:
    main = trees[0].name
    imported = report["import"][main]
    print(f"\n== {scale}x ({report['runs']} runs, {report['input_gb']:.2f} GB of JSONL, "
          f"store {report['store_gb']:.2f} GB) ==")  # fmt: skip
    print(
        f"import: {imported[0]:.1f} s, {imported[0] / report['input_gb']:.1f} s per GB, "
        f"peak RSS {imported[3]:.0f} MB (process tree), {imported[2]:.0f} MB (largest process)"
    )
    header = f"{'measure':48s}" + "".join(
        f"{t.name + ' wall':>12s}{'CPU':>8s}{'RSS MB':>8s}" for t in trees
    )
    print(header + ("  new/old wall" if len(trees) == 2 else ""))
    for name, by_tree in report["commands"].items():
        cells = "".join(_cells(by_tree.get(t.name)) for t in trees)
        ratio = ""
        if len(trees) == 2 and all(t.name in by_tree for t in trees):
            ratio = f"  {by_tree[trees[0].name][0] / by_tree[trees[1].name][0]:.2f}x"
        print(f"{name:48s}{cells}{ratio}")
    for name, (served, sql) in report["web"].items():
        print(f"{name:48s}{served * 1000:10.1f}ms   (its SQL {sql * 1000:.1f} ms)")
    print("ratios:")
    for name, value in report["ratios"].items():
        print(f"  {name:54s}{value:8.2f}x")


def _cells(measured: list[float] | None) -> str:
    if measured is None:
        return " " * 28
    return f"{measured[0]:11.2f}s{measured[1]:7.2f}s{measured[3]:8.0f}"


def flatness(report: dict, fixed_s: float) -> dict[str, Any]:
    """Import seconds per GB at each scale and the largest over the smallest; the same past
    the fixed cost of an import (`fixed_s`, which weighs most at the smallest scale)."""
    per_gb = {s: r["import"]["new"][0] / r["input_gb"] for s, r in report.items()}
    past = {s: (r["import"]["new"][0] - fixed_s) / r["input_gb"] for s, r in report.items()}
    return {
        "s_per_gb": per_gb,
        "max_over_min": max(per_gb.values()) / min(per_gb.values()),
        "fixed_s": fixed_s,
        "s_per_gb_past_fixed": past,
        "max_over_min_past_fixed": max(past.values()) / min(past.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="folder of runs (default: ../shared/data)")
    parser.add_argument("--scales", default="1,10,30", help="copies to measure, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command below 10x")
    parser.add_argument("--repeat-large", type=int, default=1, help="runs per command from 10x")
    parser.add_argument("--against", type=Path, help="a second source tree to compare with")
    parser.add_argument("--json", action="store_true", help="also print all results as JSON")
    parser.add_argument("--out", type=Path, help="write the JSON results to this file")
    parser.add_argument(
        "--work",
        type=Path,
        help="where the copies, stores and exports go (tens of GB at 100x: 10 GB of copies, "
        "a 16 GB store, its exports); a fresh folder inside it, removed at the end "
        "(default: the system temporary folder)",
    )
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="store-scale-", dir=args.work) as tmp:
        report, fixed_s = run_scales(Path(tmp), data_dir(args.data), scales, args)
    summary = {
        "command": command_line(),
        "scales": report,
        "import_flatness": flatness(report, fixed_s),
    }
    print(f"\nimport s per GB by scale: {summary['import_flatness']}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    if args.json:
        print(json.dumps(summary, indent=1))


def command_line() -> str:
    """This run's command, paths inside the checkout relative to it."""
    words = [sys.executable.rsplit("/", 1)[-1], *sys.argv]
    return " ".join(os.path.relpath(w, REPO) if w.startswith(str(REPO)) else w for w in words)


def run_scales(
    work: Path, data: Path, scales: list[int], args: argparse.Namespace
) -> tuple[dict, float]:
    """Each scale's report, and the fixed cost of an import (seconds)."""
    trees = [Tree("new", HERE_SRC, work / "new")]
    if args.against:
        trees.append(Tree("old", args.against.resolve(), work / "old"))
    for tree in trees:
        tree.work.mkdir()
    base_db = work / "base.db"
    Tree("base", HERE_SRC, work).run("import", str(data), "--db", str(base_db))
    templates = copy_templates(base_db, work)
    progress(f"writing {max(scales)} copies")
    copies = write_copies(templates, max(scales), work)
    os.sync()  # no import competes with the write-back of the copies
    fixed_s = measure_fixed_import(trees[0], templates[0], args.repeat)
    progress(f"import of one run: {fixed_s:.2f} s")
    report = {}
    for scale in scales:
        files = copies[:scale]
        repeat = args.repeat if scale < 10 else args.repeat_large
        result = measure_scale(trees, files, repeat, last=scale == max(scales))
        result["runs"] = len(templates) * scale
        result["ratios"] = ratios(result, trees[0].name)
        print_scale(scale, result, trees)
        sys.stdout.flush()
        report[str(scale)] = result
        if args.out:  # what has finished so far, in case a later scale does not
            partial = {"command": command_line(), "scales": report, "partial": True}
            args.out.write_text(json.dumps(partial, indent=1) + "\n")
    return report, fixed_s


if __name__ == "__main__":
    main()

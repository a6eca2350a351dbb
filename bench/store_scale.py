"""Store scale: the CLI on 1x, 10x and 30x copies of the real runs.

Usage: python bench/store_scale.py [DATA_DIR] [--scales 1,10,30] [--against SRC] [--json]

Imports ../shared/data once, writes N copies of every run with new ids (each copy's runs get
the run name "<run>~copyK", so their content ids differ) as trajforge JSONL files, imports them
into a fresh store with `trajforge import`, then times `ls`, `ls --json`, a filtered `ls`,
`stats`, `show`, `export` to JSONL and to Parquet as whole commands, with each command's peak
RSS. Medians of `--repeat` runs (default 3). The yardsticks measured in the same run: `ls`
against `ls --json` (goal: within 2x), JSONL export against copying the store file's bytes
(goal: within 2x), Parquet export's peak RSS (goal: at most 200 MB).

`--against SRC` runs every command with a second source tree (for example an older checkout's
`src`) on its own store, alternating with this one, and prints the ratio new / old per row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from shared_data import REPO, data_dir

HERE_SRC = REPO / "src"
FILTER = ("--outcome", "failure", "--env", "tau-airline")


class Tree:
    """One source tree of trajforge, run as `python -m trajforge` with its own store."""

    def __init__(self, name: str, src: Path, work: Path) -> None:
        self.name, self.src, self.work = name, src, work

    def run(self, *args: str) -> tuple[float, float, float]:
        """Run one command; returns (wall s, CPU s, peak RSS MB)."""
        env = dict(os.environ, PYTHONPATH=str(self.src))
        with open(os.devnull, "wb") as sink:
            start = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "trajforge", *args], env=env, stdout=sink,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        err = proc.stderr.read().decode() if proc.stderr else ""
        proc.stderr and proc.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{self.name}: trajforge {' '.join(args)} failed:\n{err}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _document(line: bytes) -> dict:
    """The trajectory document of an export line (newer exports carry each field but `id`
    and `format_version` as JSON text; older ones the plain document)."""
    record = orjson.loads(line)
    plain = ("id", "format_version")
    return {
        key: orjson.loads(value) if key not in plain and isinstance(value, str) else value
        for key, value in record.items()
    }


def write_copies(base_db: Path, src: Path, copies: int, folder: Path) -> list[Path]:
    """`copies` JSONL files, each holding every stored run once under a new id."""
    exported = folder / "base.jsonl"
    Tree("base", src, folder).run("export", "--db", str(base_db), "-o", str(exported))
    files = []
    for k in range(1, copies + 1):
        path = folder / f"copy-{k:02d}.jsonl"
        with exported.open("rb") as lines, path.open("wb") as out:
            for line in lines:
                doc = _document(line)
                doc["id"] = ""
                doc["source"]["run"] = f"{doc['source'].get('run') or 'run'}~copy{k}"
                out.write(orjson.dumps(doc) + b"\n")
        files.append(path)
    return files


def measure_scale(trees: list[Tree], files: list[Path], repeat: int, some_id: str) -> dict:
    """Every measure for each tree at one scale: {measure: {tree: [wall, cpu, rss] medians}}."""
    results: dict[str, dict[str, list[float]]] = {}
    dbs = {t.name: t.work / f"scale-{len(files)}.db" for t in trees}
    for tree in trees:  # one import each (the slowest step)
        wall, cpu, rss = tree.run("import", *map(str, files), "--db", str(dbs[tree.name]))
        results.setdefault("import", {})[tree.name] = [wall, cpu, rss]
    commands = {
        "ls": ["ls"],
        "ls --json": ["ls", "--json"],
        "ls " + " ".join(FILTER): ["ls", *FILTER],
        "stats": ["stats"],
        "show": ["show", some_id],
        "export jsonl": ["export", "-f", "jsonl", "-o", "OUT.jsonl"],
        "export parquet": ["export", "-f", "parquet", "-o", "OUT.parquet"],
    }
    for name, args in commands.items():
        samples: dict[str, list[tuple[float, float, float]]] = {t.name: [] for t in trees}
        for _ in range(repeat):
            for tree in trees:
                argv = [a.replace("OUT", str(tree.work / "out")) for a in args]
                samples[tree.name].append(tree.run(*argv, "--db", str(dbs[tree.name])))
        for tree_name, runs in samples.items():
            medians = [statistics.median(c) for c in zip(*runs, strict=True)]
            results.setdefault(name, {})[tree_name] = medians
    first = trees[0]
    copy_walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        shutil.copyfile(dbs[first.name], first.work / "copy.db")
        copy_walls.append(time.perf_counter() - start)
    results["copy store file"] = {first.name: [statistics.median(copy_walls), 0.0, 0.0]}
    for tree in trees:
        (tree.work / "copy.db").unlink(missing_ok=True)
        dbs[tree.name].unlink()
    return results


def print_scale(scale: int, n_runs: int, results: dict, trees: list[Tree]) -> None:
    print(f"\n== {scale}x ({n_runs} runs) ==")
    header = f"{'measure':40s}" + "".join(f"{t.name + ' wall':>12s}{'RSS MB':>8s}" for t in trees)
    print(header + ("  new/old wall" if len(trees) == 2 else ""))
    for name, by_tree in results.items():
        cells = "".join(
            f"{by_tree[t.name][0]:11.2f}s{by_tree[t.name][2]:8.0f}"
            if t.name in by_tree
            else " " * 20
            for t in trees
        )
        ratio = ""
        if len(trees) == 2 and all(t.name in by_tree for t in trees):
            ratio = f"  {by_tree[trees[0].name][0] / by_tree[trees[1].name][0]:.2f}x"
        print(f"{name:40s}{cells}{ratio}")
    new = trees[0].name
    ls_ratio = results["ls"][new][0] / results["ls --json"][new][0]
    copy_ratio = results["export jsonl"][new][0] / results["copy store file"][new][0]
    print(f"ratio ls / ls --json: {ls_ratio:.2f}x (goal <= 2x)")
    print(f"ratio export jsonl / copy of the store file: {copy_ratio:.2f}x (goal <= 2x)")
    print(f"export parquet peak RSS: {results['export parquet'][new][2]:.0f} MB (goal <= 200)")


def _cells(measured: list[float] | None) -> str:
    if measured is None:
        return " " * 20
    return f"{measured[0]:11.2f}s{measured[2]:8.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="folder of runs (default: ../shared/data)")
    parser.add_argument("--scales", default="1,10,30", help="copies to measure, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; medians count")
    parser.add_argument("--against", type=Path, help="a second source tree to compare with")
    parser.add_argument("--json", action="store_true", help="also print all results as JSON")
    args = parser.parse_args()
    data = data_dir(args.data)
    with tempfile.TemporaryDirectory(prefix="store-scale-") as tmp:
        work = Path(tmp)
        trees = [Tree("new", HERE_SRC, work / "new")]
        if args.against:
            trees.append(Tree("old", args.against.resolve(), work / "old"))
        for tree in trees:
            tree.work.mkdir()
        base_db = work / "base.db"
        Tree("base", HERE_SRC, work).run("import", str(data), "--db", str(base_db))
        report = {}
        for scale in (int(s) for s in args.scales.split(",")):
            files = write_copies(base_db, HERE_SRC, scale, work)
            n_runs = sum(1 for f in files for _ in f.open("rb"))
            some_id = _first_id(trees[0], files[0])
            results = measure_scale(trees, files, args.repeat, some_id)
            print_scale(scale, n_runs, results, trees)
            report[str(scale)] = {"runs": n_runs, "results": results}
            for path in files:
                path.unlink()
    if args.json:
        print(json.dumps(report, indent=1))


def _first_id(tree: Tree, copies: Path) -> str:
    """An id prefix that `show` can find: the content id of the first copied run."""
    probe = tree.work / "probe.db"
    first = tree.work / "first.jsonl"
    with copies.open("rb") as lines:
        first.write_bytes(next(lines))
    tree.run("import", str(first), "--db", str(probe))
    env = dict(os.environ, PYTHONPATH=str(tree.src))
    listed = subprocess.run(
        [sys.executable, "-m", "trajforge", "ls", "--json", "--db", str(probe)],
        env=env, capture_output=True, check=True,
    ).stdout  # fmt: skip
    probe.unlink()
    first.unlink()
    return json.loads(listed)[0]["id"]


if __name__ == "__main__":
    main()

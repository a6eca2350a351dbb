"""Big files stream: peak memory of an import stays far below the file's size.

A synthetic tau-bench run list of about 32 MB (real runs repeated under new task ids) is
imported by a fresh Python process; its peak resident memory (VmHWM of the process's own
address space; ru_maxrss would include the forking parent's size) is compared with the
same import of a one-run file. As a check that the measurement can tell the difference,
the same big file parsed whole (threshold raised) must need more than its own size.
A single 16 MB run (one-run formats are parsed whole) must need less than ten times its size.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import trajforge
from trajforge.demo import sample_dir
from trajforge.importers.base import STREAM_THRESHOLD_ENV

RUNS = sample_dir() / "tau-bench/historical_trajectories/gpt-4o-airline.json"
SOURCE = str(Path(trajforge.__file__).resolve().parents[1])
"""The child imports the trajforge under test (not whatever the venv has installed)."""
TARGET_BYTES = 32 * 1024 * 1024
MB = 1024 * 1024

MEASURE = """
import sys
from pathlib import Path
from trajforge.importers import import_paths
from trajforge.store import Store
with Store(sys.argv[1]) as store:
    report = import_paths(store, [sys.argv[2]])
assert not report.failed, report.failed
status = Path("/proc/self/status").read_text().splitlines()
peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(report.added, peak_kib * 1024)
"""


def write_runs(path: Path, target_bytes: int) -> int:
    """A JSON array of copies of the sample runs, about `target_bytes` long; returns its size."""
    runs = orjson.loads(RUNS.read_bytes())
    with path.open("wb") as out:
        out.write(b"[")
        size, copy = 1, 0
        while copy == 0 or size < target_bytes:
            run = runs[copy % len(runs)] | {"task_id": 1000 + copy}
            chunk = (b"," if copy else b"") + orjson.dumps(run)
            out.write(chunk)
            size += len(chunk)
            copy += 1
        out.write(b"]")
    return path.stat().st_size


def peak_bytes(tmp_path: Path, data: Path, threshold: int) -> tuple[int, int]:
    """(trajectories imported, peak resident bytes) of an import in a fresh process."""
    db = tmp_path / f"{data.stem}-{threshold}.db"
    env = {"PATH": "/usr/bin:/bin", STREAM_THRESHOLD_ENV: str(threshold), "PYTHONPATH": SOURCE}
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(db), str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    added, peak = result.stdout.split()
    return int(added), int(peak)


@pytest.mark.slow
def test_big_run_list_streams_in_small_memory(tmp_path: Path) -> None:
    small = tmp_path / "gpt-4o-small.json"
    write_runs(small, 1)
    big = tmp_path / "gpt-4o-big.json"
    size = write_runs(big, TARGET_BYTES)
    _, baseline = peak_bytes(tmp_path, small, 4 * MB)
    added, streamed = peak_bytes(tmp_path, big, 4 * MB)
    assert added > 1000
    assert streamed - baseline < size / 4, (
        f"streaming a {size / MB:.0f} MB file used {(streamed - baseline) / MB:.0f} MB"
    )
    _, whole = peak_bytes(tmp_path, big, 10 * size)
    assert whole - baseline > size, "parsing whole should need more than the file size"


def write_long_run(path: Path, target_bytes: int) -> int:
    """One mini-swe-agent run whose messages repeat until the file is `target_bytes` long."""
    run = orjson.loads(next(sample_dir().rglob("sympy__sympy-11618.traj.json")).read_bytes())
    steps = run["messages"][2:]
    while len(orjson.dumps(run)) < target_bytes:
        run["messages"] = run["messages"] + steps
    path.write_bytes(orjson.dumps(run))
    return path.stat().st_size


@pytest.mark.slow
def test_one_big_run_needs_less_than_ten_times_its_size(tmp_path: Path) -> None:
    small = tmp_path / "small.traj.json"
    write_long_run(small, 1)
    big = tmp_path / "big.traj.json"
    size = write_long_run(big, TARGET_BYTES // 2)
    _, baseline = peak_bytes(tmp_path, small, 4 * MB)
    _, peak = peak_bytes(tmp_path, big, 4 * MB)
    assert peak - baseline < 10 * size, f"{(peak - baseline) / size:.1f}x the file size"

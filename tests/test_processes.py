"""Worker results handed back through a spool folder: what comes back, what is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajforge.processes import (
    SPOOL_PREFIX,
    SpoolError,
    remove_orphan_spools,
    spool,
    worker_pool,
)


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path


def _big_result(size: int) -> dict[str, bytes]:
    return {"runs": os.urandom(size), "pid": str(os.getpid()).encode()}


def _fail(message: str) -> None:
    raise ValueError(message)


def test_a_result_comes_back_whole_and_its_file_is_removed(temp_root: Path) -> None:
    with spool() as results, worker_pool(1) as pool:
        future = results.submit(pool, _big_result, 3_000_000)
        name = future.result()
        assert Path(name).parent == results.folder
        value = results.result(future)
        assert len(value["runs"]) == 3_000_000
        assert value["pid"] != str(os.getpid()).encode()  # made in the worker
        assert not Path(name).exists()
    assert list(temp_root.iterdir()) == []


def test_a_workers_exception_is_raised_where_the_result_is_taken(temp_root: Path) -> None:
    with spool() as results, worker_pool(1) as pool:
        future = results.submit(pool, _fail, "bad part")
        with pytest.raises(ValueError, match="bad part"):
            results.result(future)


def test_results_not_taken_are_removed_with_the_folder(temp_root: Path) -> None:
    with spool() as results, worker_pool(1) as pool:
        results.submit(pool, _big_result, 1000).result()
        assert len(list(results.folder.iterdir())) == 1
    assert list(temp_root.iterdir()) == []


def test_a_result_that_cannot_be_written_names_the_folder(temp_root: Path) -> None:
    with spool() as results, worker_pool(1) as pool:
        results.folder.rmdir()
        future = results.submit(pool, _big_result, 10)
        with pytest.raises(SpoolError, match=f"cannot write a worker's result to {temp_root}"):
            results.result(future)


def test_the_folders_of_dead_processes_are_removed(temp_root: Path) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    orphan = temp_root / f"{SPOOL_PREFIX}{ended.stdout.strip()}-abc"
    (orphan / "part").mkdir(parents=True)
    alive = temp_root / f"{SPOOL_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    other = temp_root / "someone-elses-folder"
    other.mkdir()
    remove_orphan_spools()
    assert sorted(temp_root.iterdir()) == sorted([alive, other])

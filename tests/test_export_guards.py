"""Export targets are checked before anything is written; the store is never overwritten."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trajforge.demo import sample_dir

RUN = sample_dir() / "who-and-when" / "Algorithm-Generated" / "14.json"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args], capture_output=True, text=True, timeout=60
    )


def one_error_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "v.db"
    assert cli("import", str(RUN), "--db", str(path)).returncode == 0
    return path


def test_export_onto_the_store_is_refused(db: Path) -> None:
    before = db.read_bytes()
    one_error_line(cli("export", "-o", str(db), "--db", str(db)), "is the store")
    wal = db.with_name(db.name + "-wal")
    one_error_line(cli("export", "-o", str(wal), "--db", str(db)), "is the store")
    link = db.with_name("link.db")
    link.symlink_to(db)
    one_error_line(cli("export", "-o", str(link), "--db", str(db)), "is the store")
    assert db.read_bytes() == before


def test_export_onto_devices_folders_and_unwritable_places(db: Path, tmp_path: Path) -> None:
    one_error_line(cli("export", "-o", "/dev/full", "--db", str(db)), "not a regular file")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    one_error_line(cli("export", "-o", str(tmp_path), "--db", str(db)), "is a folder")
    one_error_line(cli("export", "-o", "/proc/x", "--db", str(db)), "/proc/x")
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    one_error_line(
        cli("export", "-o", str(blocker / "out.jsonl"), "--db", str(db)), "Not a directory"
    )
    os.mkfifo(tmp_path / "fifo")
    one_error_line(cli("export", "-o", str(tmp_path / "fifo"), "--db", str(db)), "not a regular")


def test_parquet_name_means_parquet_and_files_are_0644(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    assert cli("export", "-o", str(out), "--db", str(db)).returncode == 0
    assert pq.read_table(out).num_rows == 1
    jsonl = tmp_path / "x.jsonl"
    assert cli("export", "-o", str(jsonl), "--db", str(db)).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    for path in (out, jsonl):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_rl_export_without_token_ids_says_why(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl.jsonl"
    one_error_line(cli("export", "-f", "rl", "-o", str(out), "--db", str(db)), "token ids")
    assert not out.exists()

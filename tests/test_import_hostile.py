"""Odd files in imported folders: FIFOs, devices, names that are not UTF-8, deep nesting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trajforge.demo import sample_dir

RUN = sample_dir() / "who-and-when" / "Algorithm-Generated" / "14.json"


def cli(*args: str | bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args], capture_output=True, text=True, timeout=60
    )


def test_fifo_in_a_folder_is_skipped_and_listed(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "14.json").write_bytes(RUN.read_bytes())
    os.mkfifo(folder / "pipe.json")
    result = cli("import", str(folder), "--db", str(tmp_path / "s.db"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["imported"] == 1
    assert summary["special_files"] == [str(folder / "pipe.json")]
    text = cli("import", str(folder), "--db", str(tmp_path / "s.db"))
    assert "skipped 1 special files" in text.stdout and "pipe.json" in text.stdout


def test_fifo_or_device_named_explicitly_is_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    for path in (str(tmp_path / "pipe.json"), "/dev/zero"):
        result = cli("import", path, "--db", str(tmp_path / "s.db"))
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"error: {path}: is a ")
    assert not (tmp_path / "s.db").exists()


def test_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    odd = os.fsencode(folder) + b"/caf\xe9.txt"
    with open(odd, "wb") as handle:
        handle.write(b"not a run")
    bad = os.fsencode(folder) + b"/r\xff.json"
    with open(bad, "wb") as handle:
        handle.write(b'{"history": [], "mistake_step": "1", "question_ID": "q"}')
    result = cli("import", str(folder), "--db", str(tmp_path / "s.db"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "r\\udcff.json [record $]" in result.stderr  # the odd byte shown escaped
    result = cli("import", str(folder), "--db", str(tmp_path / "s.db"), "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"][0]["path"].endswith("r\\udcff.json")
    assert summary["not_trajectories"][0].endswith("caf\\udce9.txt")


def test_deeply_nested_json_is_one_line(tmp_path: Path) -> None:
    record = json.loads(RUN.read_text())
    record["history"][1]["deep"] = json.loads("[" * 900 + "]" * 900)
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(record))
    result = cli("import", str(path), "--db", str(tmp_path / "s.db"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert str(path) in result.stderr and "nested" in result.stderr


def test_reimport_with_model_or_run_finds_the_stored_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    folder = str(RUN.parent)
    first = json.loads(cli("import", folder, "--db", db, "--json").stdout)
    for extra in (["--model", "m1"], ["--model", "m1", "--run", "r1"], ["--run", "r2"]):
        again = json.loads(cli("import", folder, "--db", db, "--json", *extra).stdout)
        assert (again["imported"], again["duplicates"]) == (0, first["imported"])

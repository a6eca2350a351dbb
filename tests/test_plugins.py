"""Formats added by installed packages (entry points) and by dotted paths.

A tiny plug-in package is built and installed with pip into a throwaway folder (never the
shared environment), which the `trajforge` subprocesses see on their path: `formats` lists
its importer and exporter with the distribution they came from, `import` reads a file
through it (detected, and by `--format`), `export` writes through it, and its attempt to
take a built-in name is listed as shadowed. The dotted-path escape hatch works with the
module alone, without installing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PLUGIN = '''
"""A tiny log format: `user: ...` / `assistant: ...` lines, one run per file."""

from pathlib import Path

from trajforge.schema import Message, Task, Source, Trajectory


class TinyLogImporter:
    name = "tinylog"
    description = "tiny log (user:/assistant: lines)"

    def detect(self, path: Path, head: bytes) -> bool:
        return path.name.endswith(".tinylog") and head.startswith(b"user:")

    def read(self, path: Path):
        messages = []
        for line in path.read_text().splitlines():
            role, _, text = line.partition(": ")
            messages.append(Message(role=role, content=text))
        yield Trajectory(
            task=Task(id=path.stem),
            source=Source(harness="tinylog", file=str(path), format="tinylog"),
            messages=messages,
        )

    def sidecars(self, path: Path) -> list:
        return []


def write_tinylog(store, flt, out: Path) -> int:
    runs = list(store.query(flt))
    out.write_text("".join(f"{t.task.id}\\t{len(t.messages)}\\n" for t in runs))
    return len(runs)
'''

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "trajforge-tinylog"
version = "0.3.1"

[tool.setuptools]
py-modules = ["trajforge_tinylog"]

[project.entry-points."trajforge.importers"]
tinylog = "trajforge_tinylog:TinyLogImporter"
atif = "trajforge_tinylog:TinyLogImporter"

[project.entry-points."trajforge.exporters"]
tinylog = "trajforge_tinylog:write_tinylog"
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in built and pip-installed into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    package = root / "package"
    package.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "trajforge_tinylog.py").write_text(textwrap.dedent(PLUGIN))
    target = root / "installed"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation", "--target", str(target), str(package)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list(target.glob("trajforge_tinylog-0.3.1.dist-info"))
    return target


def trajforge(args: list[str], *paths: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, [SRC, *paths])))
    command = [sys.executable, "-m", "trajforge", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def write_log(folder: Path) -> Path:
    log = folder / "greeting.tinylog"
    log.write_text("user: hello\nassistant: hi, what can I do?\nuser: nothing\n")
    return log


def test_installed_plugin_is_listed_and_imports(plugin_path: Path, tmp_path: Path) -> None:
    listed = trajforge(["formats", "--json"], plugin_path, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    formats = {(f["direction"], f["name"], f["shadowed"]): f for f in json.loads(listed.stdout)}
    assert formats["import", "tinylog", False]["origin"] == "trajforge-tinylog 0.3.1"
    assert formats["export", "tinylog", False]["path"] == "trajforge_tinylog:write_tinylog"
    assert formats["import", "atif", True]["origin"] == "trajforge-tinylog 0.3.1"
    assert formats["import", "atif", False]["origin"] == "trajforge"
    log, db = write_log(tmp_path), tmp_path / "runs.db"
    imported = trajforge(
        ["import", str(tmp_path), "--db", str(db), "--json"], plugin_path, cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["by_format"] == {"tinylog": 1}
    again = trajforge(
        ["import", str(log), "--db", str(db), "--format", "tinylog"], plugin_path, cwd=tmp_path
    )
    assert again.returncode == 0 and "skipped 1 as duplicates" in again.stdout
    out = tmp_path / "runs.tsv"
    exported = trajforge(
        ["export", "--db", str(db), "--format", "tinylog", "-o", str(out)],
        plugin_path,
        cwd=tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    assert out.read_text() == "greeting\t3\n"


def test_without_the_plugin_the_file_is_not_a_run(tmp_path: Path) -> None:
    log = write_log(tmp_path)
    done = trajforge(["import", str(log), "--db", str(tmp_path / "r.db")], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "unrecognized format" in done.stderr


def test_dotted_path_escape_hatch(tmp_path: Path) -> None:
    module = tmp_path / "modules"
    module.mkdir()
    (module / "trajforge_tinylog.py").write_text(textwrap.dedent(PLUGIN))
    log, db = write_log(tmp_path), tmp_path / "runs.db"
    args = ["import", str(log), "--db", str(db), "--format", "trajforge_tinylog:TinyLogImporter"]
    assert trajforge(args, module, cwd=tmp_path).returncode == 0
    out = tmp_path / "runs.tsv"
    args = [
        "export",
        "--db",
        str(db),
        "--format",
        "trajforge_tinylog:write_tinylog",
        "-o",
        str(out),
    ]
    done = trajforge(args, module, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "greeting\t3\n"
    bad = trajforge(
        ["import", str(log), "--db", str(db), "--format", "nowhere:Thing"], cwd=tmp_path
    )
    assert bad.returncode == 1 and "cannot load import format from 'nowhere:Thing'" in bad.stderr

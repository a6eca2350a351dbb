"""The CLI starts without the heavy stacks, and long listings print plain rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli import browse
from trajforge.cli.main import COMMANDS, app
from trajforge.demo import sample_dir

HEAVY = (
    "uvicorn",
    "numpy",
    "torch",
    "sklearn",
    "pyarrow",
    "httpx",
    "jsonschema",
    "trajforge.agents",
)

LOADED_AFTER = """
import json, sys
from typer.testing import CliRunner
from trajforge.cli.main import app
loaded_by_import = sorted(m for m in {heavy} if m in sys.modules)
result = CliRunner().invoke(app, {args})
assert result.exit_code == 0, result.output
print(json.dumps([loaded_by_import, sorted(m for m in {heavy} if m in sys.modules)]))
"""


def _heavy_modules_loaded(*args: str) -> tuple[list[str], list[str]]:
    code = LOADED_AFTER.format(heavy=HEAVY, args=list(args))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    by_import, after_command = json.loads(out.splitlines()[-1])
    return by_import, after_command


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("startup") / "sample.db"
    result = CliRunner().invoke(app, ["import", str(sample_dir()), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


def test_importing_the_cli_and_listing_load_no_heavy_stack(sample_db: Path) -> None:
    by_import, after_ls = _heavy_modules_loaded("ls", "--db", str(sample_db))
    assert by_import == [] and after_ls == []


def test_showing_a_run_loads_no_heavy_stack(sample_db: Path) -> None:
    listed = CliRunner().invoke(app, ["ls", "--db", str(sample_db), "--limit", "1", "--json"])
    run_id = json.loads(listed.output)[0]["id"]
    by_import, after_show = _heavy_modules_loaded("show", run_id, "--db", str(sample_db))
    assert by_import == [] and after_show == []


def test_every_registered_command_loads() -> None:
    for name in COMMANDS:
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)


def test_long_listing_prints_plain_aligned_rows(
    sample_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browse, "RICH_TABLE_ROWS", 5)
    listed = CliRunner().invoke(app, ["ls", "--db", str(sample_db)]).stdout.splitlines()
    rows = json.loads(CliRunner().invoke(app, ["ls", "--db", str(sample_db), "--json"]).stdout)
    header = ["id", "source", "model", "env", "task", "outcome", "steps", "tokens"]
    assert listed[0].split() == header
    assert listed[-1] == f"{len(rows)} trajectories"
    body = listed[1:-1]
    assert [line.split()[0] for line in body] == [row["id"] for row in rows]
    outcomes = {True: "success", False: "failure", None: "?"}
    assert all(outcomes[row["success"]] in line for line, row in zip(body, rows, strict=True))
    assert "━" not in "".join(listed)


def test_version_flag_prints_the_package_version() -> None:
    from trajforge import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"trajforge {__version__}"

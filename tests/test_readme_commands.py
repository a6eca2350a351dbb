"""Every command in the README's bash blocks runs and exits 0, so the docs follow the CLI.

`trajforge` commands run in-process (typer's CliRunner) against a temporary store holding the
bundled sample, from a scratch folder beside which `../shared` is the shared data. `ID` and
`3f2a9c` in the README stand for a run id: a failed tau-retail run of the sample is used.
A command is skipped only for a reason listed in SKIPS, or when its README line ends in a
comment containing `docs-test: skip (why)`.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.demo import sample_dir
from trajforge.store import Store, TrajectoryFilter

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP_MARK = "docs-test: skip"
SKIPS = {
    # not the trajforge CLI
    "make ": "builds the venv; the test suite itself runs under `make test`",
    ".venv/bin/python bench/": "benchmarks run for minutes by design",
    "curl ": "talks to a running `trajforge ui`, which test_web covers",
    # servers that run until stopped (their own tests start them on free ports)
    "trajforge ui ": "a server; tests/web starts it",
    "trajforge serve ": "a server; tests/train starts it",
    "trajforge proxy ": "a server; tests/proxy starts it",
    "trajforge mock-server ": "a server; tests/models start it",
    # needs an endpoint or a model trained for minutes
    "--base-url": "needs a model endpoint (the commands are covered with the mock server in "
    "their modules' tests)",
    "TRAJFORGE_API_KEY=": "needs a real model endpoint",
    "--ckpt student/": "needs a student trained for minutes",
    "train sft": "trains for minutes",
    "--tasks 400": "a 400-episode rollout (minutes)",
    "--format rl": "needs runs recorded through the proxy (tests/proxy exports them)",
}
PLACEHOLDER_IDS = ("ID", "3f2a9c")


def readme_commands() -> list[tuple[int, str]]:
    """(line number, command) of every command in the README's bash blocks."""
    commands, block, joined, start = [], False, "", 0
    for number, line in enumerate(README.read_text().splitlines(), start=1):
        if line.startswith("```"):
            block = line.strip() == "```bash"
            continue
        if not block or not line.strip() or line.lstrip().startswith("#"):
            continue
        start = start or number
        joined += line.rstrip().removesuffix("\\")
        if line.rstrip().endswith("\\"):
            continue
        commands.extend((start, part.strip()) for part in joined.split(" && "))
        joined, start = "", 0
    return commands


def skip_reason(command: str) -> str | None:
    if SKIP_MARK in command:
        return command.split(SKIP_MARK, 1)[1].strip(" ():")
    return next((why for key, why in SKIPS.items() if key in command), None)


COMMANDS = readme_commands()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict:
    root = tmp_path_factory.mktemp("readme")
    (root / "shared").symlink_to(shared_data.parent)
    work = root / "work"
    work.mkdir()
    db = work / "trajforge.db"
    result = CliRunner().invoke(app, ["import", str(sample_dir()), "--db", str(db)])
    assert result.exit_code == 0, result.output
    _example_inputs(work, db)
    with Store(db) as store:
        failed = store.rows(TrajectoryFilter(environment="tau-retail", success=False))
    return {"work": work, "db": db, "id": failed[0].id}


def _example_inputs(work: Path, db: Path) -> None:
    """The files and stores the README's examples name, made from the bundled sample."""
    sample = sample_dir()
    shutil.copytree(sample / "swe-bench-verified/mini-swe-agent_gemini-3-pro", work / "runs")
    shutil.copy(sample / "agentrx/tau-retail/tau_dataset_full.json", work)
    chat = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    }
    with gzip.open(work / "chats.jsonl.gz", "wt") as out:
        out.write(json.dumps(chat) + "\n")
    for name in ("runs.db", "ww.db"):
        shutil.copy(db, work / name)


def test_the_readme_has_commands_and_few_skips() -> None:
    run = [c for _, c in COMMANDS if skip_reason(c) is None]
    assert len(run) >= 25 and len(run) >= len(COMMANDS) // 2  # most commands really run


@pytest.mark.parametrize(("line", "command"), COMMANDS, ids=[f"L{n}" for n, _ in COMMANDS])
def test_readme_command_runs(line: int, command: str, workspace: dict, monkeypatch) -> None:
    reason = skip_reason(command)
    if reason:
        pytest.skip(reason)
    words = shlex.split(command, comments=True)
    assert words[0] == "trajforge", f"README line {line}: add a skip reason for {command!r}"
    words = [workspace["id"] if w in PLACEHOLDER_IDS else w for w in words[1:]]
    monkeypatch.chdir(workspace["work"])
    env = {"TRAJFORGE_DB": str(workspace["db"]), "COLUMNS": "160"}
    result = CliRunner().invoke(app, words, env=env)
    assert result.exit_code == 0, f"README line {line}: {command}\n{result.output}"


def test_placeholders_are_the_only_rewrites() -> None:
    for _, command in COMMANDS:
        assert not re.search(r"<[A-Z]+>", command), f"write a runnable command: {command}"

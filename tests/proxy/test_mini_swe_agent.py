"""Real harness: mini-swe-agent from PyPI, unchanged, recorded through the proxy, and in
its own process (in-process capture, `trajforge capture -- mini ...`).

The harness runs in its own venv (kept in a cache folder outside the repository and reused;
`harness_install.py` makes it, and `make test` runs that before the suite), with its local
environment, on a small generated repository, against a scripted mock upstream behind the
proxy. Without network for the first install this test fails; it never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from trajforge.importers import import_paths
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

from .harness_install import INSTALL_TIMEOUT_S, install_mini

IN_PROCESS_REQUIREMENTS = ["orjson>=3.10"]
"""What trajforge's capture path needs beyond what mini-swe-agent installs (its source
comes from this repository, on PYTHONPATH)."""
SOURCE = Path(__file__).resolve().parents[2] / "src"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)  # a first install takes minutes


@pytest.fixture(scope="session")
def mini_executable() -> Path:
    """`mini` from a venv with mini-swe-agent 2.4.x (`make test` installs it before the
    suite; a direct pytest run installs it on first use)."""
    try:
        return install_mini()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def mini_with_trajforge(mini_executable: Path) -> Path:
    """The same venv, able to import trajforge from this repository's source."""
    python = mini_executable.parent / "python"
    marker = mini_executable.parent.parent / ".inprocess"
    if not marker.exists():
        step = [str(python), "-m", "pip", "install", "--quiet", *IN_PROCESS_REQUIREMENTS]
        result = subprocess.run(step, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(f"could not install {IN_PROCESS_REQUIREMENTS}: {result.stderr[-2000:]}")
        marker.write_text(" ".join(IN_PROCESS_REQUIREMENTS) + "\n")
    return python


def _make_repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(
        "from calc import add\n\nassert add(2, 3) == 5\nprint('ok')\n"
    )
    return repo


def _bash(command: str, thought: str) -> dict:
    return {"content": thought, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


SCRIPT = [
    _bash("cat calc.py", "Let me read the code first."),
    _bash("sed -i 's/a - b/a + b/' calc.py", "add subtracts; fix the operator."),
    _bash("python test_calc.py", "Run the test."),
    _bash(SUBMIT, "The fix works; submitting."),
]


def _run_mini(
    mini: Path,
    repo: Path,
    base_url: str,
    out: Path,
    config_dir: Path,
    launcher: list[str] | None = None,
) -> None:
    """Run `mini` on `repo` (under `launcher`, a command that takes the program after it)."""
    env = dict(
        os.environ,
        MSWEA_CONFIGURED="true",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        MSWEA_COST_TRACKING="ignore_errors",
        MSWEA_GLOBAL_CONFIG_DIR=str(config_dir),
        MSWEA_SILENT_STARTUP="1",
        PYTHONPATH=str(SOURCE),
    )
    command = [
        *(launcher or []),
        str(mini),
        "--model",
        "openai/trajforge-mock",
        "--task",
        "add() in calc.py returns the wrong result; fix it.",
        "-c",
        "mini.yaml",
        "-c",
        f"model.model_kwargs.api_base={base_url}",
        "-c",
        "model.model_kwargs.api_key=sk-mini-test-key",
        "-c",
        "agent.mode=yolo",
        "-o",
        str(out),
        "--exit-immediately",
    ]
    result = subprocess.run(
        command,
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _comparable(message: dict) -> tuple:
    calls = tuple(
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or []
    )
    return (message["role"], message.get("content") or "", calls, message.get("tool_call_id"))


def _stored_comparable(message) -> tuple:
    calls = tuple((c.id, c.name, c.arguments) for c in message.tool_calls or [])
    return (message.role, message.content or "", calls, message.tool_call_id)


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory: pytest.TempPathFactory, mini_executable: Path):
    """(repository, proxy store, mini-swe-agent's own trajectory file) of one recorded run."""
    tmp_path = tmp_path_factory.mktemp("mini")
    repo = _make_repository(tmp_path)
    db, out = tmp_path / "store.db", tmp_path / "mini.traj.json"
    with (
        MockOpenAIServer(SCRIPT) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        _run_mini(mini_executable, repo, proxy.session_url("mini-run"), out, tmp_path / "cfg")
    return repo, db, out


@pytest.fixture(scope="module")
def mini_run_in_process(tmp_path_factory: pytest.TempPathFactory, mini_with_trajforge: Path):
    """(repository, store) of the same run captured inside mini-swe-agent's own process,
    talking to the mock server directly."""
    tmp_path = tmp_path_factory.mktemp("mini-inprocess")
    repo = _make_repository(tmp_path)
    db, out = tmp_path / "store.db", tmp_path / "mini.traj.json"
    mini = mini_with_trajforge.parent / "mini"
    launcher = [str(mini_with_trajforge), "-m", "trajforge", "capture", "--db", str(db)]
    launcher += ["--session", "mini-run", "--"]
    with MockOpenAIServer(SCRIPT) as upstream:
        _run_mini(mini, repo, upstream.base_url, out, tmp_path / "cfg", launcher)
    return repo, db


def _call_record(call) -> tuple:
    extra = {k: v for k, v in call.extra.items() if k != "seq"}
    return (call.message_index, call.prompt_token_ids, call.completion_token_ids, call.logprobs,
            call.usage, call.error, extra)  # fmt: skip


def test_in_process_capture_of_mini_swe_agent_matches_the_proxy(
    mini_run, mini_run_in_process
) -> None:
    repo, db = mini_run_in_process
    assert "a + b" in (repo / "calc.py").read_text()
    ours = Store(db).get(trajectory_id("mini-run"))
    proxied = Store(mini_run[1]).get(trajectory_id("mini-run"))
    assert ours.source.harness == "inprocess"
    assert ours.messages == proxied.messages
    assert [_call_record(c) for c in ours.llm_calls] == [_call_record(c) for c in proxied.llm_calls]
    assert len(ours.llm_calls) == len(SCRIPT)
    assert all(c.prompt_token_ids and c.logprobs for c in ours.llm_calls)
    assert b"sk-mini-test-key" not in db.read_bytes()


def test_mini_swe_agent_run_is_recorded_message_for_message(mini_run) -> None:
    repo, db, out = mini_run
    assert "a + b" in (repo / "calc.py").read_text()  # the harness really ran the commands
    theirs = json.loads(out.read_text())["messages"]
    ours = Store(db).get(trajectory_id("mini-run"))
    # Everything mini-swe-agent sent to the model, and every answer, message for message.
    assert [_stored_comparable(m) for m in ours.messages] == [
        _comparable(m) for m in theirs[: len(ours.messages)]
    ]
    # After the last model call mini-swe-agent only adds the submit result and its exit record,
    # which never reach the model (so no proxy can see them).
    assert [m["role"] for m in theirs[len(ours.messages) :]] == ["tool", "exit"]
    assert len(ours.llm_calls) == len(SCRIPT)
    assistant_indices = [i for i, m in enumerate(theirs) if m["role"] == "assistant"]
    assert [c.message_index for c in ours.llm_calls] == assistant_indices
    assert all(c.extra["drift"]["status"] in ("first", "extends") for c in ours.llm_calls)
    for call in ours.llm_calls:
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.logprobs) == len(call.completion_token_ids)
    assert b"sk-mini-test-key" not in db.read_bytes()


def test_mini_swe_agent_2_trajectory_file_imports(mini_run, tmp_path: Path) -> None:
    """The file the current release writes (`mini-swe-agent-1.1`, ending in an `exit` record)
    imports: the exit record's status and submission are kept, not turned into a message."""
    _, _, out = mini_run
    theirs = json.loads(out.read_text())
    assert theirs["trajectory_format"] == "mini-swe-agent-1.1"
    assert theirs["messages"][-1]["role"] == "exit"
    with Store(tmp_path / "imported.db") as store:
        report = import_paths(store, [str(out)])
        assert report.failed == [] and report.added == 1
        (traj,) = store.query()
    exit_extra = theirs["messages"][-1]["extra"]
    assert traj.source.harness == "mini-swe-agent" and traj.source.format == "mini-swe-agent"
    assert [m.role for m in traj.messages] == [m["role"] for m in theirs["messages"][:-1]]
    assert traj.metadata["exit"] == exit_extra
    assert traj.outcome.exit_status == exit_extra["exit_status"] == "Submitted"
    assert traj.outcome.termination_reason == "submitted"
    assert traj.task.data["submission"] == exit_extra["submission"]
    assert len(traj.llm_calls) == len(SCRIPT)
    assert [c.message_index for c in traj.llm_calls] == [
        i for i, m in enumerate(theirs["messages"]) if m["role"] == "assistant"
    ]
    assert traj.messages[2].tool_calls and traj.messages[2].tool_calls[0].name == "bash"

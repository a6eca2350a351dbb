"""mini-swe-agent from PyPI, unchanged, on a real SWE-bench instance (psf/requests 6028):
its bash commands run in the swe-bench sandbox at /testbed, its model is a scripted mock
upstream behind the recording proxy, and the worktree is judged by the real judge.

The environment comes from the build cache ($TRAJFORGE_SWE_BENCH_CACHE, else
~/.cache/trajforge/swe-bench; built from PyPI on first use, about a minute). mini-swe-agent
comes from the venv `make test` installs before the suite (`harness_install.py`); without it
these tests skip. Each run takes about 30 s (mini-swe-agent's start-up is most of it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.swe.sandbox import available_backends
from trajforge.envs.swe_bench import get_instance
from trajforge.envs.swe_bench.env import SUBMIT_MARK, apply_command
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy.swe_agent import AgentRunResult, MiniSweAgentRun, run_mini_swe_agent
from trajforge.store import Store

from .harness_install import installed_mini

INSTANCE = "psf__requests-6028"
UPSTREAM_KEY = "sk-upstream-test-key"
MINI = installed_mini()
OUTSIDE = Path("/etc/trajforge-sandbox-probe")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(MINI is None, reason="mini-swe-agent not installed (harness_install.py)"),
    pytest.mark.skipif("bwrap" not in available_backends(), reason="needs bubblewrap"),
]


def _bash(command: str, thought: str) -> dict:
    return {"content": thought, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def _fixing_script() -> list[dict]:
    """Look, try the network and a host path, apply the gold patch, write patch.txt, submit
    (as mini-swe-agent's swebench.yaml asks)."""
    return [
        _bash("grep -n 'def prepend_scheme_if_needed' requests/utils.py", "Find the function."),
        _bash(
            "python -c \"import urllib.request as u; u.urlopen('https://pypi.org', timeout=5)\"",
            "Can I reach the network?",
        ),
        _bash(f"touch {OUTSIDE}; echo wrote=$?", "Can I write outside /testbed?"),
        _bash(apply_command(get_instance(INSTANCE).patch), "Apply the fix."),
        _bash("git diff -- requests/utils.py > patch.txt", "Write the patch."),
        _bash(f"echo {SUBMIT_MARK} && cat patch.txt", "Submit."),
    ]


def _run(tmp_path: Path, script: list[dict], **options) -> tuple:
    db = tmp_path / "runs.db"
    with MockOpenAIServer(script) as upstream:
        run = MiniSweAgentRun(
            executable=str(MINI.parent.parent), model_url=upstream.base_url, **options
        )
        result = run_mini_swe_agent(INSTANCE, db, run)
    with Store(db) as store:
        return result, store.get(result.trajectory_id)


@pytest.fixture(scope="module")
def fixing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The fixing script's run, through the command line."""
    folder = tmp_path_factory.mktemp("swe-agent")
    db, out = folder / "runs.db", folder / "mini.traj.json"
    with MockOpenAIServer(_fixing_script()) as upstream:
        args = ["swe", "agent", INSTANCE, "--model-url", upstream.base_url, "--db", str(db)]
        args += ["--mini", str(MINI.parent.parent), "--out", str(out), "--json"]
        done = CliRunner().invoke(app, args, env={"TRAJFORGE_API_KEY": UPSTREAM_KEY})
        keys = {h.get("authorization") for h in upstream.headers}
    assert done.exit_code == 0, done.output
    assert keys == {f"Bearer {UPSTREAM_KEY}"}  # --api-key (from the environment) reached it
    result = AgentRunResult.model_validate_json(done.stdout)
    with Store(db) as store:
        return result, store.get(result.trajectory_id), folder


def test_the_recorded_run_holds_commands_outputs_token_ids_and_the_verdict(fixing_run) -> None:
    result, traj, _ = fixing_run
    assert (result.status, result.resolved, result.exit_status) == ("resolved", True, "Submitted")
    assert traj.task.id == INSTANCE and traj.task.environment == "swe-bench"
    assert traj.outcome.success is True and traj.outcome.judged_by == "swe-bench-judge"
    assert traj.outcome.termination_reason == "submitted"
    assert traj.outcome.details["FAIL_TO_PASS"]["failure"] == []
    assert traj.outcome.details["FAIL_TO_PASS"]["success"]
    commands = [
        json.loads(c.arguments)["command"] for m in traj.messages for c in m.tool_calls or []
    ]
    assert commands == [s["tool_calls"][0]["arguments"]["command"] for s in _fixing_script()]
    outputs = [m.text() for m in traj.messages if m.role == "tool"]
    assert "960:def prepend_scheme_if_needed" in outputs[0]  # ran in the worktree
    assert "<returncode>1</returncode>" in outputs[1] and "URLError" in outputs[1]  # no network
    assert "Permission denied" in outputs[2] and not OUTSIDE.exists()  # no host path
    assert "Applied patch requests/utils.py cleanly" in outputs[3]
    assert len(traj.llm_calls) == result.model_calls == 6
    for call in traj.llm_calls:
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.logprobs) == len(call.completion_token_ids)
    harness = traj.metadata["harness"]
    assert harness["name"] == "mini-swe-agent" and harness["version"] == "2.4.6"
    assert "netloc = '@'.join([auth, netloc])" in harness["submission"]


def test_the_api_key_is_not_stored(fixing_run) -> None:
    _, _, folder = fixing_run
    assert UPSTREAM_KEY.encode() not in (folder / "runs.db").read_bytes()


def test_mini_swe_agent_keeps_its_own_trajectory_file(fixing_run) -> None:
    _, _, folder = fixing_run
    theirs = json.loads((folder / "mini.traj.json").read_text())
    assert theirs["info"]["exit_status"] == "Submitted"
    assert theirs["info"]["config"]["environment"]["cwd"] == "/testbed"
    assert len([m for m in theirs["messages"] if m["role"] == "assistant"]) == 6


def test_the_step_limit_ends_a_run_that_never_submits_unresolved(tmp_path: Path) -> None:
    looking = [_bash("ls", "Look around."), _bash("git status --short", "Anything changed?")]
    result, traj = _run(tmp_path, looking * 3, step_limit=2)
    assert (result.status, result.resolved, result.exit_status) == (
        "unresolved",
        False,
        "LimitsExceeded",
    )
    assert len(traj.llm_calls) == 2
    assert traj.outcome.success is False and traj.outcome.exit_status == "LimitsExceeded"
    assert traj.outcome.details["FAIL_TO_PASS"]["failure"]  # the base commit fails them

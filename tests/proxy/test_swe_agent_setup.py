"""The parts of `trajforge swe agent` that need no harness: the launcher mini-swe-agent's
bubblewrap environment calls (its arguments, the sandbox it runs), a missing harness and a
session name already taken."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.swe.sandbox import Layout, SandboxConfig, available_backends
from trajforge.envs.swe_bench.launcher import REFUSED, BadCall, launch_args, parse_call, write_spec
from trajforge.errors import UserError
from trajforge.proxy.session import trajectory_id
from trajforge.proxy.swe_agent import MiniSweAgentRun, run_mini_swe_agent
from trajforge.schema import Source, Task, Trajectory
from trajforge.store import Store

CALL = ["--bind", "/testbed", "/testbed", "--chdir", "/testbed"]


def test_a_call_is_read_as_mini_swe_agent_makes_it() -> None:
    env, command = parse_call([*CALL, "--setenv", "PAGER", "cat", "bash", "-c", "ls"], "/testbed")
    assert (env, command) == ({"PAGER": "cat"}, ["bash", "-c", "ls"])


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["bash", "-c", "ls"], "expected --bind"),
        (["--bind", "/tmp", "/tmp", "--chdir", "/tmp", "bash", "-c", "ls"], "must be /testbed"),
        ([*CALL, "--setenv", "PAGER"], "needs a name and a value"),
        (CALL, "no command"),
    ],
)
def test_a_call_of_another_shape_is_refused(args: list[str], problem: str) -> None:
    with pytest.raises(BadCall, match=problem):
        parse_call(args, "/testbed")


@pytest.mark.skipif("bwrap" not in available_backends(), reason="needs bubblewrap")
def test_the_launcher_runs_the_command_in_the_sandbox(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    layout = Layout(workspace_at="/testbed", env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    spec = write_spec(tmp_path / "spec.json", workspace, layout, SandboxConfig(timeout_s=20))
    launcher = [sys.executable, *launch_args(spec)]
    script = f"pwd; echo $PAGER; echo hi > made.txt; touch {tmp_path}/outside; sleep 120"
    done = subprocess.run(
        [*launcher, *CALL, "--setenv", "PAGER", "cat", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.splitlines()
    assert lines[:2] == ["/testbed", "cat"]
    assert (workspace / "made.txt").read_text() == "hi\n"
    assert not (tmp_path / "outside").exists()  # the host's folder is not there
    assert "[killed after 20 s]" in done.stdout and done.returncode == 128 + 9
    refused = subprocess.run([*launcher, "bash", "-c", "true"], capture_output=True, text=True)
    assert refused.returncode == REFUSED and refused.stdout.startswith("error: expected --bind")


def test_a_missing_harness_is_one_error_line(tmp_path: Path) -> None:
    args = ["swe", "agent", "psf__requests-6028", "--model-url", "http://127.0.0.1:9/v1"]
    result = CliRunner().invoke(app, [*args, "--mini", str(tmp_path / "none")])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: mini-swe-agent's mini-extra not found at")
    assert "make mini-swe-agent" in line


def test_a_session_already_recorded_is_refused_before_anything_runs(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        store.put(Trajectory(id=trajectory_id("taken"), task=Task(id="taken"), source=Source()))
    run = MiniSweAgentRun(
        executable="/bin/true", model_url="http://127.0.0.1:9/v1", session="taken"
    )
    with pytest.raises(UserError, match="session 'taken' is already recorded"):
        run_mini_swe_agent("psf__requests-6028", db, run)

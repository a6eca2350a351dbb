"""The swe environment: generated repositories, tools, oracle, judging, the sandbox."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from trajforge.agents import ExpertPolicy
from trajforge.envs import ENVIRONMENTS, Environment, Oracle
from trajforge.envs.swe import SandboxConfig, SweEnv, available_backends, generate_repo
from trajforge.envs.swe.sandbox import run_sandboxed
from trajforge.errors import UserError
from trajforge.rollout import run_episode
from trajforge.schema import ToolCall


def call(name: str, **args: str) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=orjson.dumps(args).decode())


@pytest.fixture
def env(tmp_path: Path):
    made = SweEnv(workdir=str(tmp_path))
    yield made
    made.close()


def test_generated_repos_cover_the_bug_families() -> None:
    families = Counter(generate_repo(seed).bug.family for seed in range(60))
    expected = {"off_by_one", "wrong_operator", "wrong_default", "missing_case", "swapped_args"}
    assert set(families) == expected
    assert generate_repo(5) == generate_repo(5)
    assert generate_repo(5).buggy != generate_repo(5).fixed


def test_registered_and_tasks_rebuild_from_ids(env: SweEnv) -> None:
    assert isinstance(ENVIRONMENTS.get("swe")(), Environment)
    assert isinstance(env, Oracle)
    tasks = env.tasks(3)
    assert [env.task_by_id(t.id) for t in tasks] == tasks
    with pytest.raises(UserError, match="swe-<seed>"):
        env.task_by_id("bug-1")


def test_expert_fixes_the_bug_and_hidden_tests_judge(env: SweEnv) -> None:
    task = env.tasks(2)[1]
    env.reset(task)
    assert not env.evaluate().success  # the hidden tests catch the bug
    assert "hidden_tests" not in str(sorted(p.name for p in env.workspace.rglob("*")))
    assert env.distance() == 1
    traj = run_episode(env, ExpertPolicy(), task)
    names = [m.tool_calls[0].name for m in traj.messages if m.tool_calls]
    assert names == ["edit", "run_tests"]
    assert traj.outcome.success and traj.outcome.judged_by == "hidden-tests"
    assert env.distance() == 0


def test_tools_read_edit_bash_and_path_confinement(env: SweEnv) -> None:
    task = env.tasks(1)[0]
    env.reset(task)
    repo = generate_repo(task.data["seed"])
    assert env.step(call("read", path=repo.bug_path)).content == repo.buggy[repo.bug_path]
    assert env.step(call("read", path="../../etc/passwd")).error
    assert "outside" in env.step(call("edit", path="/etc/hosts", old="a", new="b")).content
    assert env.step(call("edit", path=repo.bug_path, old="no such text", new="x")).error
    listing = env.step(call("bash", command="ls tests"))
    assert "test_visible.py" in listing.content and not listing.error
    assert env.step(call("bash", command="exit 3")).error
    assert not env.step(call("run_tests")).error  # visible tests pass on the buggy code


def test_snapshot_is_a_copy_of_the_workspace(env: SweEnv) -> None:
    env.reset(env.tasks(1)[0])
    saved = env.snapshot()
    env.step(env.expert_action())
    env.step(call("bash", command="echo junk > extra.txt"))
    assert env.distance() == 0
    env.restore(saved)
    assert env.distance() == 1 and not (env.workspace / "extra.txt").exists()


def test_a_confining_sandbox_exists_here() -> None:
    assert available_backends() == ("bwrap",), "no sandbox: apt-get install bubblewrap"


def test_escape_attempts_are_denied(env: SweEnv, tmp_path: Path) -> None:
    env.reset(env.tasks(1)[0])
    env.config.sandbox = SandboxConfig(timeout_s=10)
    beside = tmp_path / "escaped.txt"  # host /tmp: not there inside
    env.step(call("bash", command=f"echo pwned > {beside}"))
    assert not beside.exists()
    for target in (Path(__file__).parent / "escaped.txt", Path.home() / "escaped"):
        write = env.step(call("bash", command=f"echo pwned > {target}"))
        assert write.error and not target.exists()
    net = "python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\""
    network = env.step(call("bash", command=net))
    assert network.error and "unreachable" in network.content.lower()
    inside = env.step(call("bash", command="echo ok > inside.txt && cat inside.txt"))
    assert not inside.error and (env.workspace / "inside.txt").read_text() == "ok\n"


def test_time_limit_kills_the_command(tmp_path: Path) -> None:
    config = SandboxConfig(timeout_s=1)
    result = run_sandboxed(["bash", "-c", "sleep 30"], tmp_path, config)
    assert result.timed_out and "killed after 1 s" in result.output

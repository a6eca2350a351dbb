"""The swe-bench environment's parts that need no build: log parsing and grading, text
actions, output normalization, the build cache's all-or-nothing folders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trajforge.envs.swe_bench.build import spec_for
from trajforge.envs.swe_bench.cache import COMPLETE, build_once, is_complete
from trajforge.envs.swe_bench.env import SweBenchEnv, bash_call
from trajforge.envs.swe_bench.instances import get_instance, select_instances
from trajforge.envs.swe_bench.logs import grade, parse_pytest, parse_sympy
from trajforge.envs.swe_bench.repos import git, restore_extras, save_extras, untracked_files
from trajforge.errors import UserError
from trajforge.schema import Message

PYTEST_LOG = """\
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_paths[/testbed/tests/test_a.py]
FAILED tests/test_a.py::test_two - AssertionError: assert 1 == 2
FAILED tests/test_a.py::test_space[a b] - ValueError
SKIPPED [1] tests/test_a.py:40: needs a network
XFAIL tests/test_a.py::test_known - reason
ERROR tests/test_a.py::test_broken - fixture 'x' not found
"""


def test_pytest_log_statuses_and_the_harness_names() -> None:
    statuses = parse_pytest(PYTEST_LOG)
    assert statuses["tests/test_a.py::test_one"] == "PASSED"
    assert statuses["tests/test_a.py::test_two"] == "FAILED"
    assert statuses["tests/test_a.py::test_space[a b]"] == "FAILED"
    assert statuses["tests/test_a.py::test_space[a"] == "FAILED"  # the harness's first word
    assert statuses["tests/test_a.py::test_paths[/test_a.py]"] == "PASSED"  # a path parameter
    assert statuses["tests/test_a.py::test_broken"] == "ERROR"
    coloured = parse_pytest("\x1b[32mPASSED\x1b[0m tests/t.py::\x1b[1mtest_x\x1b[0m")
    assert coloured == {"tests/t.py::test_x": "PASSED"}


def test_sympy_log_statuses() -> None:
    log = (
        "test_simplify ok\ntest_issue_1 F\ntest_issue_2 E\ntest_slow f\n"
        "________ sympy/core/tests/test_x.py:test_crash ________\n"
    )
    statuses = parse_sympy(log)
    assert statuses == {
        "test_simplify": "PASSED",
        "test_issue_1": "FAILED",
        "test_issue_2": "ERROR",
        "test_slow": "XFAIL",
        "sympy/core/tests/test_x.py:test_crash": "FAILED",
    }


def test_grade_as_the_harness_missing_fails_skipped_counts_neither() -> None:
    statuses = {"a": "PASSED", "b": "FAILED", "s": "SKIPPED", "x": "XFAIL"}
    assert grade(["a", "x"], ["s"], statuses).resolved
    assert not grade(["a", "missing"], [], statuses).resolved
    graded = grade(["a"], ["b", "s"], statuses)
    assert not graded.resolved and graded.PASS_TO_PASS.failure == ["b"]


def test_a_message_is_an_action_only_with_exactly_one_bash_block() -> None:
    one = Message(role="assistant", content="THOUGHT: look\n\n```bash\nls -la\n```")
    call = bash_call(one)
    assert call is not None and call.name == "bash" and '"ls -la"' in call.arguments
    two = Message(role="assistant", content="```bash\nls\n```\n```bash\npwd\n```")
    assert bash_call(two) is None
    assert bash_call(Message(role="user", content="```bash\nls\n```")) is None


def test_outputs_compare_without_what_differs_between_machines() -> None:
    env = SweBenchEnv()
    recorded = (
        "platform linux -- Python 3.11.10, pytest-7.3.0\n1 passed in 0.31s\n"
        "index eb50585d..1585e706 100644\n/opt/miniconda3/envs/testbed/lib/x.py\n"
        "total 124\ndrwxrwxrwx 1 root root  4096 Oct 24  2024 .\n"
        'File "/venv/lib/python3.9/http/client.py", CPython/3.9.20'
    )
    replayed = (
        "platform linux -- Python 3.11.7, pytest-7.3.0\n1 passed in 0.05s\n"
        "index eb50585..1585e70 100644\n/venv/lib/x.py\n"
        "total 116\ndrwxr-xr-x  7 65534 65534  4096 Dec  1 21:19 .\n"
        'File "/root/.pyenv/versions/3.9.18/lib/python3.9/http/client.py", CPython/3.9.18'
    )
    assert env.comparable(recorded) == env.comparable(replayed)
    assert env.comparable("1 passed") != env.comparable("1 failed")
    assert env.comparable("-rw-r--r-- 1 root root 10 Oct 24  2024 a.py") != env.comparable(
        "-rw-r--r-- 1 root root 12 Oct 24  2024 a.py"
    )  # sizes still count


def test_instances_share_an_environment_when_their_recipe_is_equal() -> None:
    first, second = get_instance("psf__requests-1724"), get_instance("psf__requests-1766")
    assert spec_for(first).key() == spec_for(second).key()
    assert spec_for(first).key() != spec_for(get_instance("psf__requests-6028")).key()
    with pytest.raises(UserError, match="no SWE-bench instance 'nope'"):
        get_instance("nope")
    with pytest.raises(UserError, match="no instances of nothing"):
        select_instances(["nothing"])


def test_what_the_install_left_in_the_tree_is_kept_but_compiled_caches(tmp_path: Path) -> None:
    source, worktree = tmp_path / "source", tmp_path / "worktree"
    source.mkdir()
    git(source, "init", "--quiet")
    (source / ".gitignore").write_text("*.egg-info/\n")
    (source / "pkg").mkdir()
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    git(source, "add", "-A")
    git(source, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "base")
    left = {
        "build/lib/pkg/mod.py": "x = 1\n",  # an in-tree build: git does not ignore it
        "pkg.egg-info/PKG-INFO": "Name: pkg\n",  # ignored by the project
        "pkg/__pycache__/mod.cpython-311.pyc": "",
        "stray.pyc": "",
    }
    for name, text in left.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    assert untracked_files(source, ignored=True) == ["pkg.egg-info/PKG-INFO"]
    kept = untracked_files(source, ignored=False)
    assert kept == ["build/lib/pkg/mod.py"]
    save_extras(source, kept, tmp_path / "unignored.tar")
    worktree.mkdir()
    restore_extras(tmp_path / "unignored.tar", worktree)
    assert (worktree / "build/lib/pkg/mod.py").read_text() == "x = 1\n"
    assert sorted(str(p.relative_to(worktree)) for p in worktree.rglob("*") if p.is_file()) == kept


def test_a_shared_environment_leaves_only_what_this_commit_ignores(tmp_path: Path) -> None:
    """An environment built at one commit serves instances at others: its leftovers go into a
    worktree only where that worktree's own rules ignore them, and never over a tracked file."""
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    git(worktree, "init", "--quiet")
    (worktree / ".gitignore").write_text("*.egg-info/\nversion.py\n")
    (worktree / "version.py").write_text("tracked = True\n")
    git(worktree, "add", "-A")
    git(worktree, "add", "--force", "version.py")
    git(worktree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "b")
    built = tmp_path / "built"
    for name in ("pkg.egg-info/PKG-INFO", ".eggs/setuptools_scm.egg/x.py", "version.py"):
        (built / name).parent.mkdir(parents=True, exist_ok=True)
        (built / name).write_text("left by the install\n")
    names = ["pkg.egg-info/PKG-INFO", ".eggs/setuptools_scm.egg/x.py", "version.py"]
    save_extras(built, names, tmp_path / "extras.tar")
    restore_extras(tmp_path / "extras.tar", worktree, only_ignored=True)
    assert (worktree / "pkg.egg-info/PKG-INFO").is_file()
    assert not (worktree / ".eggs").exists()
    assert (worktree / "version.py").read_text() == "tracked = True\n"


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "envs" / "k"
    final.parent.mkdir()

    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("pip failed")

    with pytest.raises(RuntimeError, match="pip failed"):
        build_once(final, broken)
    assert not final.exists() and list(final.parent.glob(".tmp-*")) == []


KILLED_BUILD = """
import sys, time
from pathlib import Path
from trajforge.envs.swe_bench.cache import build_once
def slow(folder):
    (folder / "venv").mkdir()
    print("started", flush=True)
    time.sleep(60)
build_once(Path(sys.argv[1]), slow)
"""


def test_a_build_killed_midway_is_never_used_and_is_cleaned(tmp_path: Path) -> None:
    final = tmp_path / "envs" / "k"
    final.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILD, str(final)], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == b"started"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not final.exists() and len(list(final.parent.glob(".tmp-k-*"))) == 1
    final.mkdir()  # even a folder at the final name is not whole without its mark
    assert not is_complete(final)

    def good(folder: Path) -> None:
        (folder / COMPLETE).write_text("{}")

    started = time.monotonic()
    assert build_once(final, good) and is_complete(final)
    assert list(final.parent.glob(".tmp-*")) == [] and time.monotonic() - started < 5
    assert not build_once(final, good)  # built once


def test_the_ui_offers_the_gold_expert_first_on_swe_bench_runs(shared_data: Path) -> None:
    from trajforge.importers.mini_swe_agent import MiniSweAgentImporter
    from trajforge.web.forking import default_policy, fork_form

    run = shared_data / "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/pallets__flask-5014"
    parent = next(MiniSweAgentImporter().read(run / "pallets__flask-5014.traj.json")).with_id()
    assert default_policy(parent) == "gold"
    form = fork_form(parent, 4, Path("runs.db"), "")
    assert "--policy gold" in form and "<select name=policy><option>gold</option>" in form


def test_a_patch_is_applied_file_by_file() -> None:
    from trajforge.envs.swe_bench.judge import split_by_file

    patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/y b/y\n-c\n"
    assert split_by_file(patch) == [
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        "diff --git a/y b/y\n-c\n",
    ]
    assert split_by_file("--- a/x\n+++ b/x\n") == ["--- a/x\n+++ b/x\n"]


def test_the_demo_and_the_counterfactual_method_leave_swe_bench_runs_alone(
    shared_data: Path,
) -> None:
    from trajforge.demo.tau import _self_contained
    from trajforge.diagnose.counterfactual import check_forkable
    from trajforge.importers.mini_swe_agent import MiniSweAgentImporter
    from trajforge.schema import Task, Trajectory

    run = shared_data / "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/pallets__flask-5014"
    parent = next(MiniSweAgentImporter().read(run / "pallets__flask-5014.traj.json"))
    assert not _self_contained(parent)  # the demo would build it from PyPI
    assert _self_contained(Trajectory(task=Task(id="0", environment="tau-retail")))
    with pytest.raises(UserError, match="reads actions from text"):
        check_forkable(parent)

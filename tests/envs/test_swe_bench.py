"""The swe-bench environment on a real instance (psf/requests 6028), built from PyPI into a
fresh cache: a real failed mini-swe-agent run forked with the gold expert is resolved, and
bad input (patches that do not apply, a hanging test, an agent reaching for the network or
for host files) ends in a clear, recorded result. About a minute, most of it the build."""

from __future__ import annotations

import shutil
import sys
import tarfile
from pathlib import Path

import orjson
import pytest

from trajforge.envs.swe.sandbox import available_backends, hand_over, run_sandboxed
from trajforge.envs.swe_bench import SweBenchEnv, get_instance, judge_patch, testbed
from trajforge.envs.swe_bench.build import (
    BUILD_SANDBOX,
    UNIGNORED_EXTRAS,
    VENV,
    EnvSpec,
    _Builder,
    build_layout,
    ensure_env,
    pyenv_python,
)
from trajforge.envs.swe_bench.judge import JUDGE_SANDBOX
from trajforge.envs.swe_bench.repos import mirror
from trajforge.importers.mini_swe_agent import MiniSweAgentImporter
from trajforge.rollout.fork import fork
from trajforge.schema import ToolCall

INSTANCE = "psf__requests-6028"
RUN = f"swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/{INSTANCE}/{INSTANCE}.traj.json"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("bwrap" not in available_backends(), reason="needs bubblewrap"),
]


@pytest.fixture(scope="module")
def cache(swe_bench_cache: Path) -> Path:
    return swe_bench_cache


@pytest.fixture(scope="module")
def env(cache: Path) -> SweBenchEnv:
    environment = SweBenchEnv(cache=str(cache))
    yield environment
    environment.close()


def _bash(env: SweBenchEnv, command: str) -> str:
    call = ToolCall(id="", name="bash", arguments=orjson.dumps({"command": command}).decode())
    return env.step(call).content


def test_a_failed_real_run_forked_with_the_gold_expert_is_resolved(
    shared_data: Path, env: SweBenchEnv, cache: Path
) -> None:
    parent = next(MiniSweAgentImporter().read(shared_data / RUN)).with_id()
    assert parent.outcome.success is False and parent.task.environment == "swe-bench"
    child = fork(parent, 10, "gold", env=env)
    details = child.outcome.details
    assert child.outcome.success is True, (
        details["FAIL_TO_PASS"],
        details["PASS_TO_PASS"]["failure"],
    )
    assert child.outcome.termination_reason == "env_done"
    assert child.messages[:10] == parent.messages[:10]
    assert "<returncode>0</returncode>" in child.messages[11].text()  # the patch applied
    assert child.outcome.details["FAIL_TO_PASS"]["failure"] == []
    assert len(list((cache / "envs").glob("[0-9a-f]*"))) == 1  # built once, reused


def test_patches_that_do_not_apply_are_recorded_verdicts(env: SweBenchEnv, cache: Path) -> None:
    instance = get_instance(INSTANCE)
    built, repo = ensure_env(instance, cache), mirror(instance, cache)
    broken = instance.patch.replace("requests/utils.py", "requests/gone.py")
    report = judge_patch(instance, built, repo, broken)
    assert (report.status, report.resolved) == ("patch_failed", False)
    assert "the patch does not apply" in report.detail
    no_tests = instance.model_copy(update={"test_patch": instance.test_patch.replace(" ", "  ")})
    report = judge_patch(no_tests, built, repo, instance.patch)
    assert report.status == "test_patch_failed" and "test patch does not apply" in report.detail


HANGING = """\
diff --git a/tests/test_hang.py b/tests/test_hang.py
new file mode 100644
--- /dev/null
+++ b/tests/test_hang.py
@@ -0,0 +1,4 @@
+import time
+
+def test_hang():
+    time.sleep(600)
"""


def test_what_git_does_not_ignore_is_in_the_agents_tree_only(cache: Path, tmp_path: Path) -> None:
    instance = get_instance(INSTANCE)
    built, repo = ensure_env(instance, cache), mirror(instance, cache)
    folder = tmp_path / "env"
    shutil.copytree(built.folder, folder, symlinks=True, ignore=shutil.ignore_patterns("venv"))
    with tarfile.open(folder / UNIGNORED_EXTRAS, "w") as tar:
        leftover = tmp_path / "mod.py"
        leftover.write_text("x = 1\n")
        tar.add(leftover, arcname="build/lib/mod.py")
    copied = built.model_copy(update={"folder": folder})
    trees = [
        testbed.Testbed.create(instance, copied, repo, for_agent=agent) for agent in (True, False)
    ]
    try:
        agents, judges = (t.path / "build/lib/mod.py" for t in trees)
        assert agents.read_text() == "x = 1\n" and not judges.exists()
        assert (trees[1].path / "requests.egg-info").is_dir()  # what git ignores: in both
    finally:
        for tree in trees:
            tree.close()


def test_a_hanging_test_is_stopped_at_the_time_limit(cache: Path) -> None:
    instance = get_instance(INSTANCE).model_copy(
        update={"test_patch": HANGING, "test_files": ["tests/test_hang.py"]}
    )
    built, repo = ensure_env(instance, cache), mirror(instance, cache)
    limit = JUDGE_SANDBOX.model_copy(update={"timeout_s": 5})
    report = judge_patch(instance, built, repo, "", limit)
    assert (report.status, report.resolved) == ("timeout", False)
    assert 5 <= report.seconds < 30 and "killed after 5 s" in report.detail


def test_the_agent_has_no_network_and_sees_no_host_files(
    env: SweBenchEnv, shared_data: Path
) -> None:
    env.reset(env.task_by_id(INSTANCE))
    fetch = (
        "python -c \"import urllib.request; urllib.request.urlopen('https://pypi.org', timeout=5)\""
    )
    out = _bash(env, fetch)
    assert out.startswith("<returncode>1</returncode>") and "URLError" in out
    out = _bash(env, f"ls {shared_data} {sys.prefix}; touch /usr/escape; echo done")
    assert "No such file or directory" in out and "Read-only file system" in out
    assert not Path("/usr/escape").exists()
    _bash(env, "ln -s /etc/hostname link && echo x > requests/new_file.py")
    read = env.step(ToolCall(id="", name="read", arguments='{"path": "link"}'))
    assert read.error and "outside /testbed" in read.content
    assert "requests/new_file.py" in env.diff()  # the diff, read in the sandbox


def test_the_gold_oracle_and_a_handoff_on_a_real_instance(
    env: SweBenchEnv, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajforge.rollout.factory import AgentSpec
    from trajforge.rollout.handoff import HandoffConfig, agent_factory, evaluate_handoff

    task = env.task_by_id(INSTANCE)
    env.reset(task)
    assert env.distance() == 2
    monkeypatch.setenv("TRAJFORGE_SWE_BENCH_CACHE", str(cache))
    result = evaluate_handoff(
        "swe-bench",
        [task],
        agent_factory(AgentSpec(policy="expert")),
        agent_factory(AgentSpec(policy="gold")),
        HandoffConfig(k=1),
    )
    run = result.runs[0]
    assert (run.reached, run.distance_at_handoff, run.solved) == (True, 1, True)


def test_cli_validate_table_json_and_a_bad_name(cache: Path) -> None:
    import json

    from typer.testing import CliRunner

    from trajforge.cli.main import app

    runner = CliRunner()
    shown = runner.invoke(app, ["swe", "validate", "--instance", INSTANCE, "--cache", str(cache)])
    assert shown.exit_code == 0, shown.output
    assert "psf/requests" in shown.output
    assert "swe validate: instance 1/1 (100%)" in shown.stderr
    assert "last psf__requests-6028 validated" in shown.stderr
    as_json = runner.invoke(
        app, ["swe", "validate", "--instance", INSTANCE, "--cache", str(cache), "--json"]
    )
    data = json.loads(as_json.stdout)
    assert data["by_repository"] == {"psf/requests": {"instances": 1, "validated": 1}}
    refused = runner.invoke(app, ["swe", "validate", "--instance", "psf__requests-0"])
    assert refused.exit_code == 1
    assert refused.output.startswith("error: no SWE-bench instance 'psf__requests-0'")


def test_constrained_optional_pins_never_move_a_required_pin(tmp_path: Path) -> None:
    """xarray's conda list as pip pins: a wheel that fits is installed, one that would move a
    required pin or does not exist is skipped and recorded, the required pin stays."""
    spec = EnvSpec(
        repo="psf/requests",
        python=pyenv_python("3.11").name,
        base_packages=[],
        packages=["packaging==23.1"],
        optional_packages=["packaging==24.1", "six==1.16.0", "trajforge-no-such-wheel==1.0"],
        pre_install=[],
        install="",
        constrained=True,
    )
    for folder in ("src", "venv", "pip", "mirror"):
        (tmp_path / folder).mkdir()
        hand_over(tmp_path / folder)
    layout = build_layout(spec, tmp_path, tmp_path, tmp_path / "mirror")
    builder = _Builder(get_instance(INSTANCE), layout, tmp_path / "src", tmp_path / "build.log")
    builder.run("venv", f"{pyenv_python('3.11')}/bin/python3 -m venv {VENV}")
    builder.pip(spec.packages, "pip")
    builder.optional(spec.optional_packages, spec.packages)
    assert builder.skipped == ["packaging==24.1", "trajforge-no-such-wheel==1.0"]
    script = "import packaging, six; print(packaging.__version__, six.__version__)"
    versions = run_sandboxed(["python", "-c", script], tmp_path / "src", BUILD_SANDBOX, layout)
    assert versions.output.split() == ["23.1", "1.16.0"]

"""mini-swe-agent, unchanged, on a real SWE-bench instance: commands in the swe-bench
sandbox, model calls through the recording proxy, the worktree judged at the end.

`run_mini_swe_agent` makes the instance's `/testbed` worktree (building its environment
first if the cache lacks it), starts a recording proxy in front of the model endpoint and
runs mini-swe-agent's own SWE-bench runner (`mini-extra swebench-single`) on a one-instance
dataset in a private folder. Everything is set through mini-swe-agent's config: its
`bubblewrap` environment with `executable`/`wrapper_args` pointing at
`envs.swe_bench.launcher` (each command then runs in the worktree's sandbox: `/testbed`
writable, no network, no other host path), its model (`openai/NAME` via litellm) at the
proxy's session URL, its step limit, no cost limit. The run gets a wall-time limit (its
process group is killed at it). Then the worktree's diff is judged as the SWE-bench harness
judges, and the proxy's session trajectory (every call with its token ids and logprobs) is
stored with the instance as its task, the verdict as its outcome and what mini-swe-agent
reported (exit status, submission, version) in `metadata["harness"]`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from trajforge.envs.swe_bench.env import SweBenchConfig, SweBenchEnv, task_for
from trajforge.envs.swe_bench.instances import Instance, get_instance
from trajforge.envs.swe_bench.judge import JudgeReport
from trajforge.envs.swe_bench.launcher import launch_args, write_spec
from trajforge.errors import UserError
from trajforge.proxy.config import ProxyConfig
from trajforge.proxy.outcomes import session_trajectory
from trajforge.proxy.server import ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.schema import Outcome, Trajectory, compact_llm_calls
from trajforge.store import Store

HARNESS = "mini-swe-agent"
EXECUTABLE_VAR = "TRAJFORGE_MINI_SWE_AGENT"
"""Path of mini-swe-agent's `mini-extra` (or of the venv holding it)."""
INSTALL_HINT = "install it with `make mini-swe-agent` and set $TRAJFORGE_MINI_SWE_AGENT"
COMMAND_GRACE_S = 30
"""mini-swe-agent's own per-command limit is the sandbox's plus this, so the sandbox's
limit (with its note in the output) is the one that acts."""
LOG_TAIL = 2000


class MiniSweAgentRun(BaseModel):
    """One run: which mini-swe-agent, which model, which limits."""

    executable: str = Field(description="mini-swe-agent's `mini-extra` or its venv folder.")
    model_url: str = Field(description="OpenAI-compatible base URL of the model (ends in /v1).")
    model_name: str = Field(default="trajforge", description="Model name sent to the server.")
    api_key: str | None = Field(default=None, description="Key sent to the model server.")
    configs: list[str] = Field(
        default_factory=lambda: ["swebench.yaml"],
        description="mini-swe-agent config specs (files or key=value), before trajforge's.",
    )
    step_limit: int = Field(default=10, ge=1, description="mini-swe-agent's step limit.")
    time_limit_s: float = Field(default=1800.0, gt=0, description="Wall time of the run.")
    session: str | None = Field(default=None, description="Proxy session (default: made up).")
    output: str | None = Field(
        default=None, description="Where mini-swe-agent writes its own trajectory file."
    )


class AgentRunResult(BaseModel):
    """What a run left: the stored trajectory and the verdict."""

    trajectory_id: str
    session: str
    instance_id: str
    exit_status: str
    model_calls: int
    status: str
    resolved: bool
    agent_seconds: float
    judge_seconds: float


def find_executable(spec: str) -> Path:
    """`mini-extra` from a path, a venv folder or the PATH; a UserError saying how to
    install it otherwise."""
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "bin" / "mini-extra"
    found = path if path.is_file() else shutil.which(spec)
    if found is None or not os.access(found, os.X_OK):
        raise UserError(f"mini-swe-agent's mini-extra not found at '{spec}': {INSTALL_HINT}")
    return Path(found).resolve()


def run_mini_swe_agent(
    instance_id: str,
    db: str | Path,
    run: MiniSweAgentRun,
    env_config: SweBenchConfig | None = None,
    report: Callable[[str], None] = lambda _: None,
) -> AgentRunResult:
    """Run mini-swe-agent on `instance_id` in the sandbox, record it in `db`, judge it."""
    executable = find_executable(run.executable)
    instance = get_instance(instance_id, (env_config or SweBenchConfig()).data)
    session = run.session or f"{instance_id}-{uuid.uuid4().hex[:8]}"
    _require_new_session(db, session)
    env = SweBenchEnv(env_config)
    folder = Path(tempfile.mkdtemp(prefix="mini-swe-agent-"))
    try:
        report(f"making the worktree of {instance_id} (builds its environment if missing)")
        env.reset(task_for(instance))
        report(f"running mini-swe-agent on {instance_id} (session {session})")
        with ProxyServer(
            ProxyConfig(upstream=run.model_url, upstream_api_key=run.api_key), db
        ) as proxy:
            argv = _prepare(folder, instance, env, run, proxy.session_url(session))
            started = time.monotonic()
            timed_out = _run_process([str(executable), *argv], folder, run.time_limit_s)
            agent_seconds = round(time.monotonic() - started, 1)
        harness = _harness_info(folder, run, timed_out, agent_seconds, executable)
        _require_calls(db, session, harness)
        report(f"judging the worktree of {instance_id}")
        judged = env.judge(env.diff())
        traj = _store_run(db, session, instance, judged, harness)
    finally:
        env.close()
        _keep_output(folder, run.output)
        shutil.rmtree(folder, ignore_errors=True)
    return AgentRunResult(
        trajectory_id=traj.id,
        session=session,
        instance_id=instance_id,
        exit_status=harness["exit_status"],
        model_calls=len(traj.llm_calls),
        status=judged.status,
        resolved=judged.resolved,
        agent_seconds=agent_seconds,
        judge_seconds=judged.seconds,
    )


def _prepare(
    folder: Path, instance: Instance, env: SweBenchEnv, run: MiniSweAgentRun, base_url: str
) -> list[str]:
    """Write the one-instance dataset, the sandbox spec and trajforge's config; return
    `mini-extra`'s arguments."""
    testbed, command = env.testbed, env.config.command
    dataset = folder / "dataset"
    dataset.mkdir()
    record = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "version": instance.version,
        "base_commit": instance.base_commit,
        "problem_statement": instance.problem_statement,
    }
    (dataset / "test.jsonl").write_text(json.dumps(record) + "\n")
    spec = write_spec(folder / "sandbox.json", testbed.path, testbed.layout(), command)
    overrides = {
        "environment": {
            "environment_class": "bubblewrap",
            "executable": sys.executable,
            "wrapper_args": launch_args(spec),
            "cwd": testbed.layout().inside(testbed.path),
            "timeout": int(command.timeout_s) + COMMAND_GRACE_S,
        },
        "agent": {"step_limit": run.step_limit, "cost_limit": 0},
        "model": {
            "model_name": f"openai/{run.model_name}",
            "model_kwargs": {"api_base": base_url, "api_key": run.api_key or "none"},
            "cost_tracking": "ignore_errors",
        },
    }
    (folder / "trajforge.yaml").write_text(json.dumps(overrides))  # JSON is YAML
    configs = [arg for spec_ in run.configs for arg in ("-c", spec_)]
    return [
        "swebench-single", "--subset", str(dataset), "--split", "test",
        "-i", instance.instance_id, *configs, "-c", str(folder / "trajforge.yaml"),
        "--yolo", "--exit-immediately", "-o", str(folder / "run.traj.json"),
    ]  # fmt: skip


def _harness_environment(folder: Path) -> dict[str, str]:
    """mini-swe-agent's settings: no first-run wizard, its files and the datasets cache in
    `folder`, no hub lookups; trajforge's own Python settings are not passed on."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env | {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": str(folder / "config"),
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HOME": str(folder / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }


def _run_process(argv: list[str], folder: Path, time_limit_s: float) -> bool:
    """Run the harness in `folder` (output to `harness.log`); True when it was killed at
    the time limit."""
    with (folder / "harness.log").open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=folder,
            env=_harness_environment(folder),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=time_limit_s)
            return False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return True
        finally:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _harness_info(
    folder: Path, run: MiniSweAgentRun, timed_out: bool, seconds: float, executable: Path
) -> dict[str, Any]:
    """What mini-swe-agent reported in its trajectory file (exit status, submission,
    version), the limits and the time; the log's tail when it wrote no file."""
    path = folder / "run.traj.json"
    info = json.loads(path.read_text()).get("info", {}) if path.is_file() else {}
    exit_status = "max_wall_time" if timed_out else info.get("exit_status") or "no_exit_status"
    harness: dict[str, Any] = {
        "name": HARNESS,
        "version": info.get("mini_version"),
        "executable": str(executable),
        "exit_status": exit_status,
        "submission": info.get("submission"),
        "configs": run.configs,
        "step_limit": run.step_limit,
        "time_limit_s": run.time_limit_s,
        "seconds": seconds,
    }
    if not path.is_file() or timed_out:
        log = (folder / "harness.log").read_text(errors="replace")
        harness["log_tail"] = log[-LOG_TAIL:]
    return harness


def _require_new_session(db: str | Path, session: str) -> None:
    """A run's calls must not be appended to an earlier session of the same name."""
    if not Path(db).exists():
        return
    with Store(db) as store:
        if store.outcome(trajectory_id(session)) is not None:
            raise UserError(f"session '{session}' is already recorded in {db}: pick another")


def _require_calls(db: str | Path, session: str, harness: dict) -> None:
    """An error with the harness's log when it never called the model."""
    with Store(db) as store:
        if store.outcome(trajectory_id(session)) is None:
            tail = harness.get("log_tail") or harness["exit_status"]
            raise UserError(f"mini-swe-agent made no model call in session {session}: {tail}")


def _store_run(
    db: str | Path, session: str, instance: Instance, judged: JudgeReport, harness: dict
) -> Trajectory:
    """The proxy's session trajectory with the instance as its task and the verdict as its
    outcome."""
    with Store(db) as store, store.transaction():
        traj = session_trajectory(store, session)
        outcome = Outcome.model_validate(
            {
                "success": judged.resolved,
                "reward": float(judged.resolved),
                "judged_by": "swe-bench-judge",
                "termination_reason": _termination(traj, harness["exit_status"]),
                "details": judged.model_dump(exclude={"detail"})
                | {"log_tail": judged.detail[-1500:]},
            }
        )
        outcome.not_judged_for_model_error()
        labelled = traj.model_copy(
            update={
                "task": task_for(instance),
                "outcome": outcome,
                "metadata": {**traj.metadata, "harness": harness},
            }
        )
        store.put(labelled.model_copy(update={"llm_calls": compact_llm_calls(traj.llm_calls)}))
    return labelled


def _termination(traj: Trajectory, exit_status: str) -> str:
    """mini-swe-agent's exit status (`Submitted`, `LimitsExceeded`...; kept as the
    outcome's `exit_status`), `max_wall_time`, or `model_error` when its last model call
    failed."""
    last = traj.llm_calls[-1] if traj.llm_calls else None
    if exit_status != "Submitted" and last is not None and last.error:
        return "model_error"
    return exit_status


def _keep_output(folder: Path, output: str | None) -> None:
    source = folder / "run.traj.json"
    if output and source.is_file():
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, output)

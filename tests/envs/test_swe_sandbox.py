"""Sandbox escape attempts, one per confinement the `swe` environment promises."""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

import orjson
import pytest

from trajforge.agents import ExpertPolicy
from trajforge.envs.swe import SandboxConfig, SweEnv
from trajforge.envs.swe import sandbox as sandbox_module
from trajforge.envs.swe.sandbox import run_sandboxed
from trajforge.errors import UserError
from trajforge.rollout import run_episode
from trajforge.schema import ToolCall

CONFIG = SandboxConfig(timeout_s=15)


def sh(command: str, workspace: Path, config: SandboxConfig = CONFIG):
    workspace.mkdir(exist_ok=True)
    return run_sandboxed(["bash", "-c", command], workspace, config)


def call(name: str, **args: str) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=orjson.dumps(args).decode())


def test_host_unix_socket_in_tmp_is_unreachable(tmp_path: Path) -> None:
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    thread.start()
    probe = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({str(path)!r}); print('CONNECTED')"
    )
    result = sh(f'python -c "{probe}"', tmp_path / "ws")
    server.close()
    assert result.exit_code != 0 and "CONNECTED" not in result.output
    assert accepted == []


def test_only_what_commands_need_is_visible(tmp_path: Path) -> None:
    secret = tmp_path / "other-checkout" / "secret.txt"  # another folder of the host
    secret.parent.mkdir()
    secret.write_text("hunter2")
    here = Path(__file__).resolve()
    reads = [str(secret), str(here), "/etc/shadow", "/etc/passwd", str(Path.home() / ".bashrc")]
    result = sh("; ".join(f"cat {p}" for p in reads) + "; ls /home; ls -A ~root", tmp_path / "ws")
    assert "hunter2" not in result.output and "def test_" not in result.output
    assert "root:" not in result.output
    works = sh("python -I -S -c 'print(2 + 2)'; echo hi > f; cat f; git --version", tmp_path / "ws")
    assert works.exit_code == 0 and "4\nhi\ngit version" in works.output


def test_multiprocessing_locks_work_in_a_private_shm(tmp_path: Path) -> None:
    """POSIX semaphores live in /dev/shm: the sandbox's user gets its own, of Docker's size
    (pylint's parallel tests, SWE-bench PASS_TO_PASS tests, create a Pool there)."""
    probe = (
        "import multiprocessing as m, os; m.Lock(); s = os.statvfs('/dev/shm'); "
        "print('LOCKED', s.f_blocks * s.f_frsize, os.listdir('/dev/shm'))"
    )
    result = sh(f'python -c "{probe}"', tmp_path / "ws")
    assert result.exit_code == 0, result.output
    assert f"LOCKED {64 * 1024 * 1024} []" in result.output


def test_host_processes_cannot_be_signalled_and_nothing_outlives_the_command(
    tmp_path: Path,
) -> None:
    marker = "31337"
    command = f"kill -0 {os.getpid()}; echo $?; (setsid sleep {marker} &); echo started"
    result = sh(command, tmp_path / "ws")
    assert "No such process" in result.output and "started" in result.output
    alive = [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and _cmdline(pid) == f"sleep\0{marker}\0"
    ]
    assert alive == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def test_total_memory_of_all_processes_is_limited(tmp_path: Path) -> None:
    config = SandboxConfig(timeout_s=30, memory_mb=512, total_memory_mb=300)
    grab = "python -c 'import time; b = bytes(range(256)) * (600 * 2**10); time.sleep(20)'"
    result = sh(" & ".join([grab] * 4) + " & wait", tmp_path / "ws", config)
    assert result.killed_for == "memory" and "more than 300 MB" in result.output
    assert not result.timed_out


def test_process_count_is_limited(tmp_path: Path) -> None:
    config = SandboxConfig(timeout_s=8, max_processes=16)
    bomb = "for i in $(seq 60); do sleep 1 & done 2>&1 | head -3; echo done"
    result = sh(bomb, tmp_path / "ws", config)
    assert "Resource temporarily unavailable" in result.output


def test_output_is_capped(tmp_path: Path) -> None:
    config = SandboxConfig(timeout_s=30, max_output_bytes=2_000_000, max_output=100)
    result = sh("yes 0123456789", tmp_path / "ws", config)
    assert result.killed_for == "output" and len(result.output) < 300


def test_host_side_snapshot_and_evaluate_never_follow_links(tmp_path: Path) -> None:
    env = SweEnv(workdir=str(tmp_path))
    task = env.tasks(2)[1]
    env.reset(task)
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    plant = f"ln -s /dev/zero zero; ln -s {outside} out; mkfifo pipe; mkdir hidden_tests"
    assert not env.step(call("bash", command=plant)).error
    saved = env.snapshot()
    files = saved[1]
    assert not {"zero", "out", "pipe"} & set(files) and "host file" not in str(files)
    assert env.evaluate().success is False  # judged, not crashed by the planted folder
    traj = run_episode(env, ExpertPolicy(), task)
    assert traj.outcome.success  # the real hidden tests still judge
    env.restore(saved)
    assert outside.read_text() == "host file"
    env.close()


def test_no_silent_fallback_to_an_unconfined_backend(monkeypatch, tmp_path: Path, caplog) -> None:
    monkeypatch.setattr(sandbox_module, "available_backends", lambda: ())
    with pytest.raises(UserError, match="backend 'none'"):
        sh("true", tmp_path / "ws", SandboxConfig())
    with caplog.at_level(logging.WARNING, logger="trajforge.sandbox"):
        result = sh("echo plain", tmp_path / "ws", SandboxConfig(backend="none"))
    assert result.output.strip() == "plain" and "not confined" in caplog.text


def test_an_interpreter_installed_under_tmp_stays_visible(tmp_path: Path, monkeypatch) -> None:
    """A venv under /tmp (a checkout there) is bound over the sandbox's own empty /tmp."""
    prefix = tmp_path / "venv"
    prefix.mkdir()
    (prefix / "marker.txt").write_text("interpreter files")
    monkeypatch.setattr(sandbox_module.sys, "prefix", str(prefix))
    result = sh(f"cat {prefix}/marker.txt", tmp_path / "ws")
    assert "interpreter files" in result.output, result.output

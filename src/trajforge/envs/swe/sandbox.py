"""Running commands confined to a workspace.

Backends, best first (`auto` picks the first that works here):

- `bwrap`: bubblewrap. The whole filesystem read-only (/tmp too, so the interpreter works
  wherever it is installed), the workspace writable, no network, own PID namespace.
- `unshare`: util-linux `unshare` with user, mount and network namespaces: every mount is
  remounted read-only except the workspace; no network.
- `none`: a plain subprocess in the workspace (limits below, proxy variables that point
  nowhere); it does not stop writes elsewhere. Used only when chosen or nothing else works.

Every backend points TMPDIR at the workspace, sets time, memory and file-size limits
(`resource.setrlimit`) and kills the whole process group when the time is up.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trajforge.errors import UserError

Backend = Literal["auto", "bwrap", "unshare", "none"]
_UNSHARE_SCRIPT = r"""
mount --bind "$SANDBOX_WS" "$SANDBOX_WS" && mount -o remount,bind,ro / || exit 97
for m in $(awk '{print $2}' /proc/self/mounts); do
  case "$m" in "$SANDBOX_WS"|/|/proc|/proc/*|/sys|/sys/*|/dev|/dev/pts) ;;
  *) mount -o remount,bind,ro "$m" 2>/dev/null ;; esac
done
cd "$SANDBOX_WS" && exec "$@"
"""


class SandboxConfig(BaseModel):
    """How commands are confined."""

    backend: Backend = Field(default="auto", description="bwrap, unshare, none, or auto.")
    timeout_s: float = Field(default=20.0, gt=0, description="Wall-clock seconds per command.")
    memory_mb: int = Field(default=1024, gt=0, description="Address-space limit per process.")
    file_mb: int = Field(default=64, gt=0, description="Largest file a command may write.")
    max_output: int = Field(default=6000, description="Characters of output kept (the tail).")


class SandboxResult(BaseModel):
    exit_code: int
    output: str
    timed_out: bool = False


def _works(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def available_backends() -> tuple[str, ...]:
    """Confining backends that work on this machine, best first."""
    found = []
    if shutil.which("bwrap") and _works(_bwrap_argv(Path("/"), ["true"])):
        found.append("bwrap")
    if shutil.which("unshare") and _works(["unshare", "-rmn", "true"]):
        found.append("unshare")
    return tuple(found)


def resolve_backend(backend: Backend) -> str:
    if backend == "auto":
        return (available_backends() or ("none",))[0]
    if backend != "none" and backend not in available_backends():
        hint = "apt-get install bubblewrap" if backend == "bwrap" else "util-linux unshare"
        raise UserError(f"sandbox backend '{backend}' does not work here; install it ({hint})")
    return backend


def _bwrap_argv(workspace: Path, command: list[str]) -> list[str]:
    ws = str(workspace)
    return [
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--bind", ws, ws, "--unshare-all", "--die-with-parent", "--new-session",
        "--chdir", ws, "--", *command,
    ]  # fmt: skip


def _argv(backend: str, workspace: Path, command: list[str]) -> list[str]:
    if backend == "bwrap":
        return _bwrap_argv(workspace, command)
    if backend == "unshare":
        return ["unshare", "-rmn", "sh", "-c", _UNSHARE_SCRIPT, "sh", *command]
    return command


def _environment(workspace: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workspace),
        "TMPDIR": str(workspace),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(workspace),
        "SANDBOX_WS": str(workspace),
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }


def _limits(config: SandboxConfig):
    def apply() -> None:
        memory = config.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(config.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        size = config.file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_sandboxed(command: list[str], workspace: Path, config: SandboxConfig) -> SandboxResult:
    """Run `command` in `workspace` under the configured backend and limits."""
    backend = resolve_backend(config.backend)
    process = subprocess.Popen(
        _argv(backend, workspace, command),
        cwd=workspace,
        env=_environment(workspace),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_limits(config),
    )
    try:
        out, _ = process.communicate(timeout=config.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        timed_out = True
    text = out.decode(errors="replace")[-config.max_output :]
    if timed_out:
        text += f"\n[killed after {config.timeout_s:g} s]"
    return SandboxResult(exit_code=process.returncode, output=text, timed_out=timed_out)

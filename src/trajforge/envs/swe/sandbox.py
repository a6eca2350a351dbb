"""Running commands confined to a workspace.

Backends:

- `bwrap` (bubblewrap; the default, `auto`): the command sees only what it needs. The
  workspace is bound read-write; the system's `/usr` (with `/bin`, `/lib`...), the few
  `/etc` files programs load, the Python interpreter's installation and the virtual
  environment are bound read-only. Nothing else exists inside: no home folders, no other
  checkouts, a private empty `/tmp` (so no host UNIX socket), no network, own PID
  namespace (no host process is visible or can be signalled; every process of the command
  dies with it, `setsid` ones included). Run as root, the command runs as an unprivileged
  user (`SANDBOX_UID`), so the process-count limit applies to it alone.
- `none`: a plain subprocess in the workspace, with the limits below. It confines nothing
  (writes anywhere, network, host processes). It is never chosen by `auto`: it must be
  asked for (`backend="none"`), and it logs a warning each time it runs a command.

A `Layout` changes what the command sees (the `swe-bench` environment's): the workspace at
another path (`/testbed`), more folders bound read-only (a virtual environment at `/venv`,
the interpreter it was made from) or read-write, its own environment variables, and the
network (only for building environments, never for an agent's commands).

Limits on every backend: wall time, address space per process (`memory_mb`), total resident
memory of all the command's processes (`total_memory_mb`, watched every `WATCH_S` seconds;
the command is killed above it), number of processes (`max_processes`, as `RLIMIT_NPROC`),
file size (`file_mb`), and output: at most `max_output_bytes` are read from the command
(it is killed beyond that) and the last `max_output` characters are kept.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trajforge.errors import UserError

log = logging.getLogger("trajforge.sandbox")

Backend = Literal["auto", "bwrap", "none"]
SANDBOX_UID = 65534  # nobody: the user a root-run sandbox drops to
WATCH_S = 0.05
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "mime.types")


class SandboxConfig(BaseModel):
    """How commands are confined."""

    backend: Backend = Field(default="auto", description="bwrap (auto), or none (unconfined).")
    timeout_s: float = Field(default=20.0, gt=0, description="Wall-clock seconds per command.")
    memory_mb: int = Field(default=1024, gt=0, description="Address-space limit per process.")
    total_memory_mb: int = Field(
        default=1536, gt=0, description="Resident memory of all the command's processes."
    )
    max_processes: int = Field(default=64, gt=0, description="Processes the command may run.")
    file_mb: int = Field(default=64, gt=0, description="Largest file a command may write.")
    max_output: int = Field(default=6000, description="Characters of output kept (the tail).")
    max_output_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Output read before the command is killed."
    )


class Layout(BaseModel):
    """What a sandboxed command sees besides the system (default: the workspace at its own
    path, no network, the toy environment's variables)."""

    workspace_at: str | None = Field(
        default=None, description="Path of the workspace inside (default: its own path)."
    )
    read_only: list[tuple[str, str]] = Field(
        default_factory=list, description="(host path, path inside) bound read-only."
    )
    writable: list[tuple[str, str]] = Field(
        default_factory=list, description="(host path, path inside) bound read-write."
    )
    network: bool = Field(default=False, description="Share the host's network (builds only).")
    host_python: bool = Field(
        default=True, description="Bind the interpreter running trajforge (the toy's tests use it)."
    )
    env: dict[str, str] | None = Field(
        default=None, description="The command's environment (default: the toy's)."
    )
    silent_hosts: list[str] = Field(
        default_factory=list,
        description="Addresses whose connections hang, as on a network that drops them, "
        "instead of failing at once (root runs only; tests that expect a connect timeout).",
    )

    def inside(self, workspace: Path) -> str:
        return self.workspace_at or str(workspace)


_NETWORK_ETC = ("resolv.conf", "hosts", "nsswitch.conf", "gai.conf", "ssl", "ca-certificates")
DEFAULT_LAYOUT = Layout()


class SandboxResult(BaseModel):
    exit_code: int
    output: str
    timed_out: bool = False
    killed_for: str | None = None


@functools.cache
def available_backends() -> tuple[str, ...]:
    """Confining backends that work on this machine."""
    if not shutil.which("bwrap"):
        return ()
    try:
        done = subprocess.run(
            _bwrap_argv(Path("/tmp"), ["true"]), capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return ("bwrap",) if done.returncode == 0 else ()


def resolve_backend(backend: Backend) -> str:
    """The backend to use; never silently a weaker one than asked."""
    if backend == "none":
        return "none"
    if "bwrap" not in available_backends():
        raise UserError(
            "no confining sandbox works here: install bubblewrap (apt-get install bubblewrap), "
            "or ask for the unconfined backend explicitly (sandbox backend 'none')"
        )
    return "bwrap"


def _system_binds() -> list[str]:
    """`--ro-bind`/`--symlink` arguments for the system folders and the files of /etc needed."""
    args: list[str] = []
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += _folders(Path("/etc/x"))
    for name in _ETC:
        if Path("/etc", name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _interpreter_binds() -> list[str]:
    """`--ro-bind` arguments for the interpreter and its libraries outside /usr (a venv may sit
    under /tmp, so these come after the sandbox's own empty /tmp)."""
    args: list[str] = []
    for root in sorted({sys.base_prefix, sys.prefix}):
        if not root.startswith("/usr/") and Path(root).is_dir():
            args += [*_folders(Path(root)), "--ro-bind", root, root]
    return args


def _folders(path: Path) -> list[str]:
    """Make the folders above `path` inside the sandbox traversable (bwrap makes them 0700)."""
    args: list[str] = []
    for parent in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _layout_binds(layout: Layout) -> list[str]:
    """Binds of a layout's extra folders (after /tmp: they may sit under it on the host)."""
    args: list[str] = []
    for host, inside in layout.read_only:
        args += [*_folders(Path(inside)), "--ro-bind", host, inside]
    for host, inside in layout.writable:
        args += [*_folders(Path(inside)), "--bind", host, inside]
    if layout.network:
        for name in _NETWORK_ETC:
            if Path("/etc", name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _namespaces(layout: Layout) -> list[str]:
    if os.geteuid():
        return ["--unshare-all", *(["--share-net"] if layout.network else [])]
    shared = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    return shared + ([] if layout.network else ["--unshare-net"])


SHM_BYTES = 64 * 1024 * 1024
"""A private, writable /dev/shm of Docker's default size: POSIX semaphores live there, so
without it `multiprocessing.Lock()` fails for the sandbox's user (pylint's parallel mode)."""


def _bwrap_argv(workspace: Path, command: list[str], layout: Layout = DEFAULT_LAYOUT) -> list[str]:
    ws = layout.inside(workspace)
    user = [
        "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all",
    ]  # fmt: skip
    return [
        "bwrap", *_system_binds(), "--dev", "/dev", "--proc", "/proc",
        "--perms", "01777", "--tmpfs", "/tmp",
        "--size", str(SHM_BYTES), "--perms", "01777", "--tmpfs", "/dev/shm",
        *(_interpreter_binds() if layout.host_python else []),
        *_layout_binds(layout), *_folders(Path(ws)),
        "--bind", str(workspace), ws, *_namespaces(layout),
        "--die-with-parent", "--new-session", "--chdir", ws, "--",
        *_routes(layout), *(user if os.geteuid() == 0 else []), *command,
    ]  # fmt: skip


def _routes(layout: Layout) -> list[str]:
    """A prefix that routes the silent hosts into the loopback, where they are dropped."""
    if os.geteuid() != 0 or layout.network or not layout.silent_hosts:
        return []
    routes = "; ".join(f"ip route add {shlex.quote(h)}/32 dev lo" for h in layout.silent_hosts)
    return ["sh", "-c", f'{{ {routes}; }} 2>/dev/null; exec "$@"', "sh"]


def _argv(backend: str, workspace: Path, command: list[str], layout: Layout) -> list[str]:
    return _bwrap_argv(workspace, command, layout) if backend == "bwrap" else command


def _environment(workspace: Path) -> dict[str, str]:
    bin_dirs = [str(Path(sys.executable).parent), str(Path(sys.base_prefix, "bin"))]
    return {
        "PATH": ":".join([*bin_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(workspace),
        "TMPDIR": str(workspace),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(workspace),
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _limits(config: SandboxConfig, processes: int):
    def apply() -> None:
        memory = config.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(config.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        size = config.file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))

    return apply


def hand_over(workspace: Path) -> None:
    """Give the workspace to the sandbox user (root runs only; links are not followed)."""
    if os.geteuid() != 0:
        return
    os.lchown(workspace, SANDBOX_UID, SANDBOX_UID)
    for root, dirs, files in os.walk(workspace):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID)


def run_sandboxed(
    command: list[str],
    workspace: Path,
    config: SandboxConfig,
    layout: Layout = DEFAULT_LAYOUT,
) -> SandboxResult:
    """Run `command` in `workspace` under the configured backend and limits, seeing what
    `layout` adds."""
    backend = resolve_backend(config.backend)
    if backend == "none":
        log.warning("sandbox backend 'none': the command is not confined: %s", command[:3])
    uid = SANDBOX_UID if backend == "bwrap" and os.geteuid() == 0 else os.getuid()
    if backend == "bwrap":
        hand_over(workspace)
    # RLIMIT_NPROC counts every process of the user: the command may add `max_processes`.
    processes = config.max_processes + _processes_of(uid)
    process = subprocess.Popen(
        _argv(backend, workspace, command, layout),
        cwd=workspace,
        env=layout.env if layout.env is not None else _environment(workspace),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_limits(config, processes),
    )
    return _Watch(process, config).run()


class _Watch:
    """Reads a command's output and stops it at the time, memory or output limit."""

    def __init__(self, process: subprocess.Popen, config: SandboxConfig) -> None:
        if process.stdout is None:
            raise ValueError("the sandboxed command's output must be a pipe")
        self.process = process
        self.stdout = process.stdout
        self.config = config
        self.tail = bytearray()
        self.read = 0
        self.killed_for: str | None = None

    def run(self) -> SandboxResult:
        deadline = time.monotonic() + self.config.timeout_s
        selector = selectors.DefaultSelector()
        selector.register(self.stdout, selectors.EVENT_READ)
        open_ = True
        while open_ and self.killed_for is None:
            if time.monotonic() >= deadline:
                self._kill("time")
                break
            if selector.select(timeout=WATCH_S):
                open_ = self._drain()
            self._check_memory()
        selector.close()
        self.stdout.close()
        if self.killed_for is None:
            try:
                self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._kill("time")
        self.process.wait()
        return self._result()

    def _drain(self) -> bool:
        chunk = os.read(self.stdout.fileno(), 65536)
        if not chunk:
            return False
        self.read += len(chunk)
        keep = self.config.max_output * 4
        self.tail = (self.tail + chunk)[-keep:]
        if self.read > self.config.max_output_bytes:
            self._kill("output")
        return True

    def _check_memory(self) -> None:
        if _tree_rss(self.process.pid) > self.config.total_memory_mb * 1024 * 1024:
            self._kill("memory")

    def _kill(self, reason: str) -> None:
        self.killed_for = reason
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def _result(self) -> SandboxResult:
        text = self.tail.decode(errors="replace")[-self.config.max_output :]
        notes = {
            "time": f"[killed after {self.config.timeout_s:g} s]",
            "memory": f"[killed: its processes used more than {self.config.total_memory_mb} MB]",
            "output": f"[killed: more than {self.config.max_output_bytes} bytes of output]",
        }
        if self.killed_for:
            text += "\n" + notes[self.killed_for]
        return SandboxResult(
            exit_code=self.process.returncode,
            output=text,
            timed_out=self.killed_for == "time",
            killed_for=self.killed_for,
        )


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * _PAGE
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def workspace_files(workspace: Path, max_mb: int) -> list[tuple[str, bytes]]:
    """(relative path, content) of the regular files under `workspace`, read on the host
    without following any link: a link (to `/dev/zero`, to a file outside) is skipped,
    each file is opened with `O_NOFOLLOW` and read up to `max_mb`."""
    found = []
    for root, dirs, files in os.walk(workspace):  # os.walk does not descend into links
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(root, name)
            content = _read_regular(path, max_mb * 1024 * 1024)
            if content is not None:
                found.append((os.path.relpath(path, workspace), content))
    return found


def _read_regular(path: str, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # a link (ELOOP), gone, unreadable
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return handle.read(limit)


def special_entries(folder: str, names: list[str]) -> set[str]:
    """For `shutil.copytree(ignore=...)`: the entries that are neither files, folders nor
    links (FIFOs, sockets, devices), which copying would open."""
    special = set()
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            special.add(name)
    return special

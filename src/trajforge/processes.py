"""Worker processes: how they start, and how many cores this process may use."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from trajforge.errors import UserError

Item = TypeVar("Item")
Result = TypeVar("Result")


def process_context() -> multiprocessing.context.BaseContext:
    """Fork where it is safe and cheap (Linux: workers start with trajforge already loaded)."""
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows do not report it
        return os.cpu_count() or 1


def ignore_interrupts() -> None:
    """A worker's initializer: Ctrl-C stops the parent, which stops its workers; the workers
    themselves do not each print a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def worker_pool(
    workers: int, initializer: Callable[[], object] | None = None
) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` processes, started before it is handed out; on leaving, work not
    yet begun is cancelled and the workers are joined.

    While forked workers start, this process's objects are frozen out of the garbage
    collector (`gc.freeze`): a collection in a worker would otherwise visit every inherited
    object and so copy each memory page they live on (household episodes on 2 workers:
    half the page faults, 8% less CPU).
    """
    pool = ProcessPoolExecutor(workers, process_context(), initializer=initializer)
    gc.freeze()
    try:
        pool.submit(int).result()  # with fork, the first task starts every worker
    finally:
        gc.unfreeze()
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


SPOOL_PREFIX = "trajforge-spool-"


class SpoolError(UserError):
    """A result could not be written to, or read from, the spool's folder (a full disk)."""


ROOM = "set TMPDIR to a folder with room"


class Spool:
    """Results of worker processes handed back through files in a folder, not the pool's pipe.

    Through the pipe, a worker that has made a large result (megabytes of runs or lines)
    waits until this process has read all of it, and the pool's own thread reads it here,
    taking the GIL from the busy main thread for every 64 KB: the worker stands still
    meanwhile. Through a file, the worker writes its result at memory speed and goes on to
    the next task, and this process reads the file when it takes the result.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def submit(self, pool: Executor, func: Callable[..., Result], *args: Any) -> Future[str]:
        """Run `func(*args)` in the pool; the future gives the file its result is in."""
        return pool.submit(_spooled, str(self.folder), func, *args)

    def result(self, future: Future[str]) -> Any:
        """What `func` returned (its exception is raised here); the file is removed."""
        name = future.result()
        try:
            with open(name, "rb") as handle:
                data = handle.read()
            os.unlink(name)
        except OSError as exc:
            raise SpoolError(
                f"cannot read a worker's result from {self.folder}: {exc}; {ROOM}"
            ) from None
        return pickle.loads(data)


def _spooled(folder: str, func: Callable[..., Result], *args: Any) -> str:
    result = func(*args)
    try:
        handle, name = tempfile.mkstemp(dir=folder)
        with os.fdopen(handle, "wb") as out:
            pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as exc:
        raise SpoolError(f"cannot write a worker's result to {folder}: {exc}; {ROOM}") from None
    return name


@contextmanager
def spool() -> Iterator[Spool]:
    """A `Spool` in a new folder of the system's temporary folder (`$TMPDIR`), removed on
    leaving. The folders of processes that died before removing theirs are removed first."""
    remove_orphan_spools()
    try:
        folder = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-")
    except OSError as exc:
        raise SpoolError(f"cannot make a folder for workers' results: {exc}; {ROOM}") from None
    try:
        yield Spool(Path(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_orphan_spools() -> None:
    """Remove the spool folders whose process is no longer running (killed, say)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*-*"):
        pid = folder.name.removeprefix(SPOOL_PREFIX).partition("-")[0]
        if pid.isdigit() and not process_running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def process_running(pid: int) -> bool:
    """Whether a process with this id runs (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def ordered_map(
    pool: ProcessPoolExecutor, func: Callable[[Item], Result], items: Iterable[Item], ahead: int
) -> Iterator[Result]:
    """`func` of each item, in the items' order, computed by the pool with at most `ahead`
    items handed out before their results are taken (so memory stays bounded); the results
    come back through a `spool`."""
    with spool() as results:
        pending: deque[Future[str]] = deque()
        for item in items:
            pending.append(results.submit(pool, func, item))
            if len(pending) >= ahead:
                yield results.result(pending.popleft())
        while pending:
            yield results.result(pending.popleft())


def ray_session(cpus: int) -> Any:
    """The `ray` module with a session: the running one, else the cluster at `$RAY_ADDRESS`,
    else a local Ray with `cpus` CPUs whose workers run at the caller's priority. Workers
    need only trajforge installed."""
    try:
        import ray
    except ImportError:
        raise UserError("the ray backend needs Ray: pip install 'trajforge[ray]'") from None
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:
            # Ray runs its workers at nice 15; on a busy machine they then wait behind every
            # other job, and a local run is the user's main job (3-4x slower under a niced
            # neighbour). A value the user set is kept.
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=max(1, cpus), include_dashboard=False, log_to_driver=False)
    return ray

"""Worker processes: how they start, and how many cores this process may use."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
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


def ordered_map(
    pool: ProcessPoolExecutor, func: Callable[[Item], Result], items: Iterable[Item], ahead: int
) -> Iterator[Result]:
    """`func` of each item, in the items' order, computed by the pool with at most `ahead`
    items handed out before their results are taken (so memory stays bounded)."""
    pending: deque[Future[Result]] = deque()
    for item in items:
        pending.append(pool.submit(func, item))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


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

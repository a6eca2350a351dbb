"""Where builds and judgements run: `local` (one after another in this process) or `ray`
(one Ray task each, at most `concurrency` at a time).

A backend is a function `(function, items, concurrency) -> iterator of (index, result)`
that yields each item's result as it finishes. The function and its items must pickle (a
module-level function, or a `functools.partial` of one, and pydantic records). Ray uses the
running session, else `$RAY_ADDRESS`, else a local Ray with `concurrency` CPUs.

Every worker must see the same cache folder (one machine, or a shared filesystem with
`flock`): the cache's lock per environment (`cache.build_once`) is what keeps two tasks
from building one environment at once; the second waits on the lock and then finds the
first one's complete build. A `UserError` raised in a task (a `BuildError`, an unknown
instance) reaches the caller as itself, not wrapped in Ray's task error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from trajforge.errors import UserError
from trajforge.processes import ray_session
from trajforge.registry import Registry

T = TypeVar("T")
R = TypeVar("R")

JOB_BACKENDS: Registry = Registry("backend")
JOB_BACKENDS.register("local", "trajforge.envs.swe_bench.backends:run_local")
JOB_BACKENDS.register("ray", "trajforge.envs.swe_bench.backends:run_ray")


def run_local(
    function: Callable[[T], R], items: Sequence[T], concurrency: int
) -> Iterator[tuple[int, R]]:
    """In this process, in order (`concurrency` is not used: builds and test runs are
    sandboxed subprocesses already)."""
    for index, item in enumerate(items):
        yield index, function(item)


def run_ray(
    function: Callable[[T], R], items: Sequence[T], concurrency: int
) -> Iterator[tuple[int, R]]:
    """A Ray task per item (one CPU each), `concurrency` running at a time; results as
    they finish."""
    if not items:
        return
    ray = ray_session(concurrency)
    remote = ray.remote(num_cpus=1)(_call)
    pending = list(reversed(range(len(items))))
    active: dict[Any, int] = {}
    while pending or active:
        while pending and len(active) < max(1, concurrency):
            index = pending.pop()
            active[remote.remote(function, items[index])] = index
        ready, _ = ray.wait(list(active), num_returns=1)
        index = active.pop(ready[0])
        yield index, _result(ray, ready[0])


def _call(function: Callable[[T], R], item: T) -> R:
    return function(item)


def _result(ray: Any, ref: Any) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, UserError):
            raise exc.cause from None
        raise


def run_jobs(
    backend: str, function: Callable[[T], R], items: Sequence[T], concurrency: int = 1
) -> Iterator[tuple[int, R]]:
    """`function` on each item on the named backend: (index, result) as each finishes."""
    run: Callable[..., Iterator[tuple[int, R]]] = JOB_BACKENDS.get(backend)
    return run(function, items, concurrency)

"""Store reads off the event loop: each runs in a worker thread, on that thread's own
connection, within a time budget.

A page that reads the store on the event loop holds up every other request for as long as
its query runs (a search for `a* OR b* OR ... OR h*` over a big store takes seconds). Here
the loop only waits: other pages, static files and event streams go on, and a query that
runs past the budget is stopped by SQLite and answered with a 503 that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from trajforge.store import Store, ThreadStores

T = TypeVar("T")


class StoreReads:
    """`await reads(fn)`: `fn(store)` in a worker thread, stopped after `budget_s` seconds."""

    def __init__(self, path: Path, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self._stores = ThreadStores(path)

    async def __call__(self, read: Callable[[Store], T]) -> T:
        return await run_in_threadpool(self._run, read)

    def _run(self, read: Callable[[Store], T]) -> T:
        store = self._stores.get()
        with store.time_budget(self.budget_s):
            return read(store)

    def close(self) -> None:
        self._stores.close()

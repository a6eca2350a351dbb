"""One store connection per thread, for readers that run in a pool of threads (the UI).

An SQLite connection runs one statement at a time: threads sharing one would queue behind
each other's slowest query. Each thread here opens its own `Store` on the same file the
first time it reads, and keeps it; WAL lets them all read while a writer commits.
"""

from __future__ import annotations

import threading
from pathlib import Path

from trajforge.store.sqlite import Store


class ThreadStores:
    """The calling thread's own `Store` over `path` (opened on first use, closed by `close`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[Store] = []

    def get(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = Store(self.path)
            self._local.store = store
            with self._lock:
                self._opened.append(store)
        return store

    def close(self) -> None:
        """Close every thread's connection (when the threads are done reading)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for store in opened:
            store.close()

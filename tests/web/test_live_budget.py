"""An event stream whose poll runs past the time budget goes on: that poll sends nothing, and
the next one sends what it missed (its position had not moved)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from starlette.requests import Request

from trajforge.store import Store
from trajforge.web.live import poll_stream
from trajforge.web.reading import StoreReads

from .conftest import UiStore

SLOW_SQL = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
"""Counts for ever: only the time budget stops it."""


class _OpenClient:
    """A request whose client stays for `polls` polls."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    async def is_disconnected(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_a_poll_past_the_budget_sends_nothing_and_the_next_one_catches_up(
    ui_store: UiStore, monkeypatch
) -> None:
    monkeypatch.setattr("trajforge.web.live.POLL_S", 0.01)
    calls: list[str] = []

    def poll(store: Store) -> list[bytes]:
        calls.append("poll")
        if len(calls) == 1:
            store.db.execute(SLOW_SQL).fetchone()  # stopped by the budget
        return [b"event: run\ndata: {}\n\n"]

    async def stream() -> list[bytes]:
        reads = StoreReads(Path(ui_store.db), 0.05)
        try:
            request = cast(Request, _OpenClient(polls=2))
            return [message async for message in poll_stream(request, reads, poll)]
        finally:
            reads.close()

    messages = asyncio.run(stream())
    assert calls == ["poll", "poll"]
    assert messages == [b": watching\n\n", b"event: run\ndata: {}\n\n"]

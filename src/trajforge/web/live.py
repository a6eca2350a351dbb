"""Live: server-sent events for runs written while the page is open (proxy sessions grow by
rewrites, rollouts add runs), and the activity view of recent batches and sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping

import orjson
from starlette.requests import Request

from trajforge.store import QueryTooSlow, Store
from trajforge.store.runs import activity_since, changes_since, latest_position, recent_runs
from trajforge.web.html import h, outcome_badge, run_link, table
from trajforge.web.reading import StoreReads

POLL_S = 0.5
KEEPALIVE_S = 15.0
WINDOW_S = 3600.0
"""The live page shows what was written in the last hour."""


async def poll_stream(
    request: Request, reads: StoreReads, poll: Callable[[Store], list[bytes]]
) -> AsyncIterator[bytes]:
    """An event stream: what `poll(store)` returns every `POLL_S` (ready `event:` messages,
    read off the event loop), and a comment now and then while nothing happens, until the
    client goes away. A poll past the time budget sends nothing and the next one tries
    again (`poll` moves its position only when it returns)."""
    yield b": watching\n\n"
    quiet = 0.0
    while not await request.is_disconnected():
        try:
            events = await reads(poll)
        except QueryTooSlow:
            events = []
        for message in events:
            yield message
        quiet = 0.0 if events else quiet + POLL_S
        if quiet >= KEEPALIVE_S:
            quiet = 0.0
            yield b": keepalive\n\n"
        await asyncio.sleep(POLL_S)


def event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def run_events(
    reads: StoreReads,
    request: Request,
    params: Mapping[str, str],
    render_row: Callable[[Store, str, Mapping[str, str]], tuple[str, dict] | None],
) -> AsyncIterator[bytes]:
    """`event: run` for every run written from now on that matches the page's filters, with
    its runs-table row as HTML and as JSON."""
    rowid, created_at = await reads(latest_position)

    def poll(store: Store) -> list[bytes]:
        nonlocal rowid, created_at
        changes = changes_since(store, rowid, created_at)
        events = []
        for change in changes:
            shown = render_row(store, change.id, params)
            if shown is not None:
                row_html, row_json = shown
                events.append(event("run", {"id": change.id, "html": row_html, "run": row_json}))
        for change in changes:  # moved once every change is rendered
            rowid = max(rowid, change.rowid)
            created_at = max(created_at, change.created_at)
        return events

    return poll_stream(request, reads, poll)


def activity_block(store: Store) -> str:
    """Recent rollout batches and proxy sessions: done, successes, open, faults so far."""
    since = time.time() - WINDOW_S
    groups = activity_since(store, since)
    rows = [
        [
            h(a.source),
            h(a.run),
            str(a.runs),
            str(a.successes),
            str(a.failures),
            str(a.open),
            str(a.faults),
            str(a.messages),
            time.strftime("%H:%M:%S", time.localtime(a.last_at)),
        ]
        for a in groups
    ]
    headers = ["source", "run", "episodes", "successes", "failures", "in progress", "faults",
               "messages", "last write"]  # fmt: skip
    recent = [
        [
            run_link(i),
            h(src),
            str(n),
            outcome_badge(status),
            time.strftime("%H:%M:%S", time.localtime(at)),
        ]
        for i, src, n, status, at in recent_runs(store, since)
    ]
    return (
        '<div id="activity">'
        f"<h2>Batches and sessions (last hour)</h2>{table(headers, rows)}"
        f"<h2>Latest runs</h2>{table(['id', 'source', 'messages', 'outcome', 'written'], recent)}"
        "</div>"
    )


def live_page(store: Store) -> str:
    return (
        "<h1>Live</h1><p class=dim>Proxy sessions and rollouts appear here as they are written; "
        'this view refreshes itself on every change.</p><p id="live-status" class="dim">'
        "connecting…</p>" + activity_block(store)
    )

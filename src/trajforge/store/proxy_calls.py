"""The `proxy_calls` table: one row per call the recording proxy relayed, in session order.

The store knows the columns, not the `CapturedCall` model (which lives in the proxy layer);
`trajforge.proxy.recorder` maps between the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from trajforge.store.sqlite import Store

_COLUMNS = (
    "session, seq, trajectory_id, call_id, endpoint, status, error, started_at, latency_s, doc"
)


class ProxyCallRow(NamedTuple):
    session: str
    seq: int
    trajectory_id: str
    call_id: str | None
    endpoint: str
    status: int
    error: str | None
    started_at: float
    latency_s: float
    doc: bytes


def insert_proxy_call(store: Store, row: ProxyCallRow) -> None:
    """Add one call (inside the caller's transaction)."""
    store.db.execute(
        f"INSERT INTO proxy_calls ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row
    )


def session_call_documents(store: Store, session: str) -> Iterator[bytes]:
    """The documents of a session's calls, in the order they were relayed."""
    for (doc,) in store.db.execute(
        "SELECT doc FROM proxy_calls WHERE session = ? ORDER BY seq", (session,)
    ):
        yield doc


def sessions_not_assembled(store: Store) -> list[str]:
    """Sessions whose stored trajectory is missing or was assembled from fewer calls than
    the table holds (its `metadata.n_calls`)."""
    rows = store.db.execute(
        "SELECT p.session, COUNT(*), json_extract(CAST(t.doc AS TEXT), '$.metadata.n_calls') "
        "FROM proxy_calls p LEFT JOIN trajectories t ON t.id = p.trajectory_id "
        "GROUP BY p.session"
    ).fetchall()
    return [session for session, count, assembled in rows if count != assembled]

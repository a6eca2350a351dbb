"""The `diagnoses` table: one row per (trajectory, method), the document as JSON bytes.

The store knows the columns, not the `Diagnosis` model (which lives in a higher layer);
`trajforge.diagnose.storage` maps between the two.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from trajforge.store.sqlite import Store

_COLUMNS = "id, trajectory_id, method, step, agent, category, verified, created_at, doc"


class DiagnosisRow(NamedTuple):
    id: str
    trajectory_id: str
    method: str
    step: int | None
    agent: str | None
    category: str | None
    verified: bool
    created_at: float
    doc: bytes


def put_diagnoses(store: Store, rows: Iterable[DiagnosisRow]) -> int:
    """Insert or replace, all in one transaction; returns how many were written."""
    count = 0
    with store.transaction():
        for row in rows:
            values = (*row[:6], int(row.verified), row.created_at, row.doc)
            store.db.execute(
                f"INSERT OR REPLACE INTO diagnoses ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                values,
            )
            count += 1
    return count


def diagnosis_documents(
    store: Store,
    trajectory_ids: Iterable[str] | None = None,
    method: str | None = None,
    verified_only: bool = False,
) -> list[bytes]:
    """Stored diagnosis documents, oldest first, optionally for some trajectories or one
    method."""
    clauses: list[str] = []
    params: list = []
    if trajectory_ids is not None:
        ids = list(trajectory_ids)
        if not ids:
            return []
        clauses.append(f"trajectory_id IN ({','.join('?' for _ in ids)})")
        params.extend(ids)
    if method is not None:
        clauses.append("method = ?")
        params.append(method)
    if verified_only:
        clauses.append("verified = 1")
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    rows = store.db.execute(f"SELECT doc FROM diagnoses{where} ORDER BY created_at", params)
    return [bytes(doc) for (doc,) in rows]

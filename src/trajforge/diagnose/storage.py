"""Reading and writing diagnoses in the store's `diagnoses` table.

One diagnosis per (trajectory, method): diagnosing again replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable

from trajforge.diagnose.model import Diagnosis
from trajforge.store import Store

_COLUMNS = "id, trajectory_id, method, step, agent, category, verified, created_at, doc"


def save_diagnoses(store: Store, diagnoses: Iterable[Diagnosis]) -> int:
    """Insert or replace, all in one transaction; returns how many were written."""
    count = 0
    with store.transaction():
        for diagnosis in diagnoses:
            diagnosis.with_id()
            store.db.execute(
                f"INSERT OR REPLACE INTO diagnoses ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    diagnosis.id,
                    diagnosis.trajectory_id,
                    diagnosis.method,
                    diagnosis.step,
                    diagnosis.agent,
                    diagnosis.category,
                    int(diagnosis.verified),
                    diagnosis.created_at,
                    diagnosis.model_dump_json().encode(),
                ),
            )
            count += 1
    return count


def load_diagnoses(
    store: Store,
    trajectory_ids: Iterable[str] | None = None,
    method: str | None = None,
    verified_only: bool = False,
) -> list[Diagnosis]:
    """Stored diagnoses, oldest first, optionally for some trajectories or one method."""
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
    return [Diagnosis.model_validate_json(doc) for (doc,) in rows]

"""Reading and writing diagnoses in the store's `diagnoses` table.

One diagnosis per (trajectory, method): diagnosing again replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from trajforge.diagnose.model import Diagnosis
from trajforge.store import Store
from trajforge.store.diagnoses import DiagnosisRow, diagnosis_documents, put_diagnoses


def save_diagnoses(store: Store, diagnoses: Iterable[Diagnosis]) -> int:
    """Insert or replace, all in one transaction; returns how many were written."""
    return put_diagnoses(store, _rows(diagnoses))


def _rows(diagnoses: Iterable[Diagnosis]) -> Iterator[DiagnosisRow]:
    for diagnosis in diagnoses:
        diagnosis.with_id()
        yield DiagnosisRow(
            diagnosis.id,
            diagnosis.trajectory_id,
            diagnosis.method,
            diagnosis.step,
            diagnosis.agent,
            diagnosis.category,
            diagnosis.verified,
            diagnosis.created_at,
            diagnosis.model_dump_json().encode(),
        )


def load_diagnoses(
    store: Store,
    trajectory_ids: Iterable[str] | None = None,
    method: str | None = None,
    verified_only: bool = False,
) -> list[Diagnosis]:
    """Stored diagnoses, oldest first, optionally for some trajectories or one method."""
    documents = diagnosis_documents(store, trajectory_ids, method, verified_only)
    return [Diagnosis.model_validate_json(doc) for doc in documents]

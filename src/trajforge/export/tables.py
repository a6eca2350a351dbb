"""JSONL (exact round trip) and Parquet (analytics) exports.

Both write to a temporary file beside the target and rename it into place, so a failed export
never leaves a half-written file.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

from trajforge.outputs import atomic_output
from trajforge.schema import Trajectory

PARQUET_BATCH = 500


def atomic_path(out: Path) -> AbstractContextManager[Path]:
    """A temporary path that replaces `out` only when the block succeeds (`atomic_output`)."""
    return atomic_output(out)


def write_jsonl(trajs: Iterable[Trajectory], out: Path) -> int:
    """One trajectory document per line; `trajforge import` reads it back exactly."""
    count = 0
    with atomic_path(out) as tmp, tmp.open("wb") as handle:
        for traj in trajs:
            handle.write(traj.model_dump_json().encode() + b"\n")
            count += 1
    return count


def _parquet_row(traj: Trajectory) -> dict:
    return {
        "id": traj.id,
        "harness": traj.source.harness,
        "model": traj.source.model,
        "run": traj.source.run,
        "environment": traj.task.environment,
        "task_id": traj.task.id,
        "success": traj.outcome.success,
        "reward": traj.outcome.reward,
        "n_messages": len(traj.messages),
        "n_steps": len(traj.assistant_indices()),
        "prompt_tokens": traj.usage.prompt_tokens,
        "completion_tokens": traj.usage.completion_tokens,
        "total_tokens": traj.usage.total_tokens,
        "n_labels": len(traj.labels),
        "n_faults": len(traj.faults),
        "parent_id": traj.parent.trajectory_id if traj.parent else None,
        "fork_index": traj.parent.message_index if traj.parent else None,
        "document": traj.model_dump_json(),
    }


def write_parquet(trajs: Iterable[Trajectory], out: Path) -> int:
    """One row per trajectory: summary columns plus the full document as JSON text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    writer = None
    with atomic_path(out) as tmp:
        batch: list[dict] = []
        for traj in trajs:
            batch.append(_parquet_row(traj))
            count += 1
            if len(batch) >= PARQUET_BATCH:
                writer = _write_batch(pa, pq, writer, tmp, batch)
                batch = []
        if batch or writer is None:
            writer = _write_batch(pa, pq, writer, tmp, batch)
        writer.close()
    return count


def _write_batch(pa, pq, writer, path: Path, batch: list[dict]):
    table = pa.Table.from_pylist(batch, schema=_schema(pa))
    if writer is None:
        writer = pq.ParquetWriter(str(path), table.schema)
    writer.write_table(table)
    return writer


def _schema(pa):
    text, integer = pa.string(), pa.int64()
    return pa.schema(
        [
            ("id", text),
            ("harness", text),
            ("model", text),
            ("run", text),
            ("environment", text),
            ("task_id", text),
            ("success", pa.bool_()),
            ("reward", pa.float64()),
            ("n_messages", integer),
            ("n_steps", integer),
            ("prompt_tokens", integer),
            ("completion_tokens", integer),
            ("total_tokens", integer),
            ("n_labels", integer),
            ("n_faults", integer),
            ("parent_id", text),
            ("fork_index", integer),
            ("document", text),
        ]
    )

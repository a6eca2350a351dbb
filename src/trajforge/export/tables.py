"""JSONL (exact round trip, one schema per line for `datasets`) and Parquet (analytics).

Both write to a temporary file beside the target and rename it into place, so a failed export
never leaves a half-written file.
"""

from __future__ import annotations

from array import array
from contextlib import AbstractContextManager
from pathlib import Path

from trajforge.outputs import atomic_output
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.lines import line_of_document


def atomic_path(out: Path) -> AbstractContextManager[Path]:
    """A temporary path that replaces `out` only when the block succeeds (`atomic_output`)."""
    return atomic_output(out)


def write_jsonl(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """One trajectory per line in the export's line shape (`store.lines`: `id` and
    `format_version` as they are, every other field as JSON text), so every line has the
    same keys and types; `trajforge import` reads it back exactly."""
    count = 0
    with atomic_path(out) as tmp, tmp.open("wb") as handle:
        for document in store.documents(flt):
            handle.write(line_of_document(document))
            handle.write(b"\n")
            count += 1
    return count


PARQUET_COLUMNS = (
    ("id", "id", "string"),
    ("harness", "harness", "string"),
    ("model", "model", "string"),
    ("run", "run", "string"),
    ("environment", "environment", "string"),
    ("task_id", "task_id", "string"),
    ("success", "success", "bool_"),
    ("reward", "reward", "float64"),
    ("termination_reason", "termination_reason", "string"),
    ("n_messages", "n_messages", "int64"),
    ("n_steps", "n_steps", "int64"),
    ("prompt_tokens", "prompt_tokens", "int64"),
    ("completion_tokens", "completion_tokens", "int64"),
    ("total_tokens", "total_tokens", "int64"),
    ("n_labels", "n_labels", "int64"),
    ("n_faults", "n_faults", "int64"),
    ("parent_id", "parent_id", "string"),
    ("fork_index", "fork_index", "int64"),
    ("document", "doc", "string"),
)
"""Parquet column, stored column it comes from, Arrow type (the document last)."""


def write_parquet(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """One row per trajectory: summary columns plus the full document as JSON text, built
    from the store's columns in bounded batches (no document is decoded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, getattr(pa, kind)()) for name, _, kind in PARQUET_COLUMNS])
    sources = [source for _, source, _ in PARQUET_COLUMNS]
    summary = [name for name, _, _ in PARQUET_COLUMNS if name != "document"]
    # Documents are large and unique: no dictionary, no min/max statistics (which would keep
    # two whole documents per row group in the file's metadata, in memory until the end).
    options = {"use_dictionary": summary, "write_statistics": summary}
    count = 0
    with atomic_path(out) as tmp, pq.ParquetWriter(str(tmp), schema, **options) as writer:
        for batch in store.column_batches(sources, flt):
            *columns, documents = zip(*batch, strict=True)
            arrays = [_array(pa, v, f.type) for v, f in zip(columns, schema, strict=False)]
            arrays.append(_text_array(pa, documents))
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
            count += len(batch)
    return count


def _array(pa, values: tuple, kind):
    if kind == pa.bool_():  # SQLite stores booleans as 0/1
        return pa.array(values, type=pa.int8()).cast(kind)
    return pa.array(values, type=kind)


def _text_array(pa, documents: tuple[bytes, ...]):
    """A string array over the documents' UTF-8 bytes, joined once (no str objects made)."""
    offsets = array("i", [0])
    end = 0
    for document in documents:
        end += len(document)
        offsets.append(end)
    data = pa.py_buffer(b"".join(documents))
    return pa.StringArray.from_buffers(len(documents), pa.py_buffer(offsets), data)

"""JSONL (exact round trip, one schema per line for `datasets`) and Parquet (analytics).

Both write to a temporary file beside the target and rename it into place, so a failed export
never leaves a half-written file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from trajforge.errors import UserError
from trajforge.outputs import atomic_folder, atomic_output
from trajforge.processes import ignore_interrupts, ordered_map, usable_cores, worker_pool
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.lines import line_of_document
from trajforge.store.parquet import SHARD_GLOB


def atomic_path(out: Path) -> AbstractContextManager[Path]:
    """A temporary path that replaces `out` only when the block succeeds (`atomic_output`)."""
    return atomic_output(out)


JSONL_BATCH_BYTES = 4_000_000
"""Documents turned into lines at a time; past the first batch, worker processes do it."""
JSONL_BATCH_ROWS = 2000
"""At most this many runs a batch (a worker reads them with one `rowid IN (...)`)."""


def write_jsonl(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """One trajectory per line in the export's line shape (`store.lines`: `id` and
    `format_version` as they are, every other field as JSON text), so every line has the
    same keys and types; `trajforge import` reads it back exactly.

    The cost is turning a document into its line (a parse and a serialization of every
    field), not reading or writing. So past the first batch, a worker per core reads its
    batch of rows from the store file and returns its lines, and this process writes them
    in rowid order."""
    count = 0
    with atomic_path(out) as tmp, tmp.open("wb") as handle:
        for lines, rows in _line_batches(store, flt):
            handle.write(lines)
            count += rows
    return count


def _line_batches(store: Store, flt: TrajectoryFilter) -> Iterator[tuple[bytes, int]]:
    """(lines, number of lines) of each batch of matching rows, in rowid order."""
    batches = _rowid_batches(store.document_sizes(flt))
    first = next(batches, None)
    if first is None:
        return
    yield _lines_of_rows(store, first)
    workers = usable_cores()
    if workers < 2 or str(store.path) == ":memory:":
        yield from (_lines_of_rows(store, rowids) for rowids in batches)
        return
    read = functools.partial(_read_lines, str(store.path))
    with worker_pool(workers, initializer=ignore_interrupts) as pool:
        yield from ordered_map(pool, read, batches, ahead=2 * workers)


def _rowid_batches(sizes: Iterable[tuple[int, int]]) -> Iterator[list[int]]:
    batch: list[int] = []
    size = 0
    for rowid, length in sizes:
        batch.append(rowid)
        size += length
        if size >= JSONL_BATCH_BYTES or len(batch) >= JSONL_BATCH_ROWS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _lines_of_rows(store: Store, rowids: list[int]) -> tuple[bytes, int]:
    documents = store.documents_at(rowids)
    return b"".join(line_of_document(d) + b"\n" for d in documents), len(documents)


_WORKER_STORES: dict[str, Store] = {}
"""A worker's own connection to each store it reads (opened at its first batch)."""


def _read_lines(path: str, rowids: list[int]) -> tuple[bytes, int]:
    if path not in _WORKER_STORES:
        _WORKER_STORES[path] = Store(path)
    return _lines_of_rows(_WORKER_STORES[path], rowids)


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
    ("format", "format", "string"),
    ("source_file", "source_file", "string"),
    ("search_text", "search_text", "large_string"),
    ("document", "doc", "string"),
)
"""Parquet column, stored column it comes from, Arrow type (the document last).
`search_text` is what the store's full-text index holds for the run, so `--parquet` reads
search the same text."""


def write_parquet(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """One row per trajectory: summary columns, the searched text and the full document as
    JSON text, built from the store's columns in bounded batches (no document is decoded)."""
    with atomic_path(out) as tmp:
        return _write_parquet_files(store, flt, lambda _: tmp, None)


def write_parquet_shards(store: Store, flt: TrajectoryFilter, out: Path, shard_rows: int) -> int:
    """`write_parquet` cut into files of at most `shard_rows` runs, `out/part-00000.parquet`
    on, in the store's order (what `ls --parquet`, `stats --parquet` read back with DuckDB).
    Written into a folder beside `out` that replaces it only when every shard is written."""
    if shard_rows < 1:
        raise UserError(f"--shard-rows must be at least 1, got {shard_rows}")
    with atomic_folder(out, SHARD_GLOB) as tmp:
        return _write_parquet_files(store, flt, lambda n: tmp / f"part-{n:05d}.parquet", shard_rows)


def _write_parquet_files(
    store: Store, flt: TrajectoryFilter, path_of: Callable[[int], Path], shard_rows: int | None
) -> int:
    """Write the rows into the files `path_of(0)`, `path_of(1)`, ... of at most `shard_rows`
    rows each (one file when None; an empty one when nothing is selected); returns the
    number of rows."""
    import pyarrow.parquet as pq

    schema = _parquet_schema()
    summary = [name for name, _, _ in PARQUET_COLUMNS if name not in ("search_text", "document")]
    # Documents are large and unique: no dictionary, no min/max statistics (which would keep
    # two whole documents per row group in the file's metadata, in memory until the end).
    options = {"use_dictionary": summary, "write_statistics": summary}
    batches = store.column_batches([source for _, source, _ in PARQUET_COLUMNS], flt)
    count, current, writer = 0, -1, None
    try:
        for number, batch in _numbered(batches, shard_rows):
            if writer is None or number != current:
                writer and writer.close()
                writer, current = pq.ParquetWriter(str(path_of(number)), schema, **options), number
            writer.write_table(_table(schema, batch))
            count += len(batch)
    finally:
        writer and writer.close()
    if writer is None:
        pq.ParquetWriter(str(path_of(0)), schema, **options).close()
    return count


def _parquet_schema():
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, _, kind in PARQUET_COLUMNS])


def _numbered(batches: Iterable[list[tuple]], limit: int | None) -> Iterator[tuple[int, list]]:
    """(file number, rows) for each batch, split where a file of `limit` rows ends (None:
    every batch in file 0)."""
    seen = 0
    for batch in batches:
        while limit and batch:
            room = limit - seen % limit
            yield seen // limit, batch[:room]
            seen, batch = seen + len(batch[:room]), batch[room:]
        if batch:
            yield 0, batch


def _table(schema, batch: list[tuple]):
    import pyarrow as pa

    from trajforge.export.arrow_columns import column_array

    columns = zip(*batch, strict=True)
    arrays = [
        column_array(values, field.type) for values, field in zip(columns, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)

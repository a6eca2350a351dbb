"""The SQLite trajectory store: one file, WAL, migrations, idempotent writes."""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from pydantic_core import to_json

from trajforge.errors import UserError
from trajforge.schema import FORMAT_VERSION, Outcome, OutcomeStatus, Trajectory, outcome_status
from trajforge.store.filters import TrajectoryFilter
from trajforge.store.migrations import migrate
from trajforge.store.opening import (
    check_is_trajforge,
    check_store_path,
    hold,
    open_store,
    release,
)
from trajforge.store.search_text import RunSearchText, run_search_text

DEFAULT_DB = "trajforge.db"
BULK_CHECKPOINT_PAGES = 65536
BUSY_TIMEOUT_MS = 30000
BUDGET_CHECK_STEPS = 1000
"""SQLite virtual-machine steps between two looks at a read's time budget (FTS5 expanding a
prefix* term takes about 0.1 s per 1000 steps on a big index)."""
PENDING_INDEX_CHARS = 1_000_000
DB_ENV_VAR = "TRAJFORGE_DB"
CHECK_SEARCH_SQL = (
    "SELECT count(*) FROM (SELECT rowid FROM run_search WHERE run_search MATCH ? LIMIT 1)"
)

_COLUMNS = (
    "id, format_version, harness, model, run, environment, task_id, success, reward, "
    "n_messages, n_steps, total_tokens, parent_id, fork_index, format, source_file, "
    "prompt_tokens, completion_tokens, n_labels, n_faults, episode_key, episode_env, "
    "termination_reason, created_at, doc"
)
_SEARCH_TEXT = "(SELECT body FROM run_search WHERE run_search.rowid = trajectories.rowid)"
_N_ROW_VALUES = len(_COLUMNS.split(",")) - 2  # all but created_at and doc


class TrajectoryRow(NamedTuple):
    """The indexed summary of a stored trajectory (no messages). A tuple, not a model:
    listings read one per run, and at 100,000 runs a validated model took 1.3 KB and about
    10 us each, seven times the tuple's memory and time."""

    id: str
    harness: str | None
    model: str | None
    run: str | None
    environment: str | None
    task_id: str | None
    success: bool | None
    reward: float | None
    n_messages: int
    n_steps: int
    total_tokens: int | None
    parent_id: str | None
    fork_index: int | None
    format: str | None
    source_file: str | None
    termination_reason: str | None = None

    @property
    def status(self) -> OutcomeStatus:
        """Success, failure, model error or unjudged (see `OutcomeStatus`)."""
        return outcome_status(self.success, self.termination_reason)


class StoreFull(UserError):
    """The disk (or the store's page limit) is full: the transaction was rolled back."""


class QueryTooSlow(UserError):
    """A read ran past its time budget and SQLite stopped it (`Store.time_budget`)."""


def default_db_path() -> Path:
    return Path(os.environ.get(DB_ENV_VAR) or DEFAULT_DB)


class EncodedTrajectory(NamedTuple):
    """A validated trajectory, serialized for the store: its row values and JSON document.

    Made by `encode()` from a `Trajectory` (a model pydantic has validated), so
    `Store.add_encoded` inserts it without parsing the document again. Small and cheap to
    pickle: a Ray worker returns it instead of a document the driver would validate again.
    """

    row: tuple = ()
    """Values of the indexed columns, in `_COLUMNS` order, without `created_at` and `doc`."""
    document: bytes = b""
    """The JSON document, `id` included."""
    search: RunSearchText = RunSearchText("", None, None)
    """What the full-text index holds for the run."""

    @property
    def id(self) -> str:
        return self.row[0]

    def decode(self) -> Trajectory:
        """The trajectory again (validating the document)."""
        return _decode(self.document)


def encode(traj: Trajectory) -> EncodedTrajectory:
    """Serialize once: sets `traj.id` to its content id when empty (as `Store.add` does)."""
    traj.id, document = traj.identified_document()
    return EncodedTrajectory(_row_values(traj), document, run_search_text(traj))


def _row_values(traj: Trajectory) -> tuple:
    total = traj.usage.total_tokens
    if total is None and traj.usage.prompt_tokens is not None:
        total = traj.usage.prompt_tokens + (traj.usage.completion_tokens or 0)
    success = None if traj.outcome.success is None else int(traj.outcome.success)
    parent = traj.parent
    return (
        traj.id,
        traj.format_version,
        traj.source.harness,
        traj.source.model,
        traj.source.run,
        traj.task.environment,
        traj.task.id,
        success,
        traj.outcome.reward,
        len(traj.messages),
        len(traj.assistant_indices()),
        total,
        parent.trajectory_id if parent else None,
        parent.message_index if parent else None,
        traj.source.format,
        traj.source.file,
        traj.usage.prompt_tokens,
        traj.usage.completion_tokens,
        len(traj.labels),
        len(traj.faults),
        _text_or_none(traj.metadata.get("episode_key")),
        _text_or_none(traj.metadata.get("env")),
        traj.outcome.exit_status or traj.outcome.termination_reason,  # as the document records it
    )


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _checked(encoded: EncodedTrajectory) -> EncodedTrajectory:
    """Refuse an encoded trajectory whose document does not open with its row's identity."""
    row, document, search = encoded
    if not isinstance(search, RunSearchText):
        raise ValueError("not an encoded trajectory (use trajforge.store.encode)")
    if len(row) != _N_ROW_VALUES or not isinstance(row[1], int) or not isinstance(document, bytes):
        raise ValueError("not an encoded trajectory (use trajforge.store.encode)")
    traj_id, version = row[0], row[1]
    head = b'{"format_version":%d,"id":%s,' % (version, to_json(traj_id))
    if not traj_id or version > FORMAT_VERSION or not document.startswith(head):
        raise ValueError(f"encoded trajectory {traj_id!r}: document does not match its row")
    return encoded


class _PendingMark(NamedTuple):
    """Where the held-back full-text rows stood: how many, their characters, and how many
    had been set to None."""

    rows: int = 0
    chars: int = 0
    forgotten: int = 0


class Store:
    """A trajectory store in one SQLite file.

    Writes go through `add` / `put` inside `transaction()`; a failure inside a transaction
    leaves the file exactly as it was.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if str(self.path) != ":memory:":
            check_store_path(self.path)
        self.db = open_store(self.path, _prepare, BUSY_TIMEOUT_MS / 1000)
        self._release = (
            weakref.finalize(self, release, hold(self.path))
            if str(self.path) != ":memory:"
            else None
        )
        """Counts the file as open in this process until closed (or collected)."""
        self._depth = 0
        self._savepoints: list[_PendingMark] = []
        """Where the held-back rows stood when each open savepoint began."""
        self._defer_index = False
        self._pending_index: list[tuple[int | None, RunSearchText | None]] = []
        """Held-back full-text rows; None for a run replaced or deleted since."""
        self._pending_chars = 0
        self._forgotten: list[tuple[int, tuple[int | None, RunSearchText | None]]] = []
        """(position, row) of each held-back row set to None, to restore on a rollback."""

    def close(self) -> None:
        self.db.close()
        if self._release is not None:
            self._release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all (nesting joins the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
            self._write_pending_index()
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._cut_pending(_PendingMark())
            if self.db.in_transaction:  # SQLite rolls back by itself on some errors
                self.db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and _disk_full(exc):
                raise StoreFull(
                    f"{self.path}: the disk is full (SQLITE_FULL): nothing of this "
                    "transaction was stored, and the store is as it was before it; free some "
                    "space and run the command again"
                ) from None
            raise
        finally:
            self._depth = 0

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: the writes of this block are undone alone if it raises
        (the transaction goes on); outside one, the block is its own transaction."""
        if not self._depth:
            with self.transaction():
                yield
            return
        if not self._savepoints and self._pending_chars > PENDING_INDEX_CHARS:
            self._write_pending_index()  # between two files: the earlier files' rows
        self._savepoints.append(
            _PendingMark(len(self._pending_index), self._pending_chars, len(self._forgotten))
        )
        self.db.execute("SAVEPOINT part")
        try:
            yield
        except BaseException:
            if self.db.in_transaction:  # else SQLite rolled the whole transaction back
                self.db.execute("ROLLBACK TO part")
            self._undo_pending(self._savepoints[-1])
            raise
        finally:
            if self.db.in_transaction:
                self.db.execute("RELEASE part")
            self._savepoints.pop()

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Many transactions in a row (an import): fewer copies of the written pages.

        Filling an empty store that no other connection has open, the write-ahead log is set
        aside until the block ends: with a rollback journal, pages appended to the file are
        written once, not to the log and then again into the file (each transaction is still
        atomic; SQLite refuses the switch while another connection has the file open, and
        then the log stays). Otherwise the log is checkpointed every `BULK_CHECKPOINT_PAGES`
        pages instead of SQLite's default 1000 (about 4 MB), which synced the database file
        dozens of times while importing a 100 MB folder.
        """
        with self._index_at_commit():
            if self._is_empty() and self._journal_mode("delete") == "delete":
                try:
                    yield
                finally:
                    self._journal_mode("wal")
                return
            (previous,) = self.db.execute("PRAGMA wal_autocheckpoint").fetchone()
            self.db.execute(f"PRAGMA wal_autocheckpoint={BULK_CHECKPOINT_PAGES}")
            try:
                yield
            finally:
                self.db.execute(f"PRAGMA wal_autocheckpoint={previous}")
                self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextmanager
    def _index_at_commit(self) -> Iterator[None]:
        """Full-text index rows written just before each commit, not with each run.

        SQLite's full-text index (FTS5) writes out what it holds in memory at every
        savepoint, so an import that keeps each file in its own savepoint wrote and merged
        index segments per file: more work than indexing the text. Held back, the rows of a
        commit are indexed together, or between two files once `PENDING_INDEX_CHARS` of text
        wait; a big file of many runs writes its own rows each time that much has waited
        inside its savepoint, so memory stays bounded. A savepoint rolled back drops the
        rows it held back.
        """
        self._defer_index = True
        try:
            yield
        finally:
            self._defer_index = False

    @contextmanager
    def time_budget(self, seconds: float | None) -> Iterator[None]:
        """Statements run inside stop with `QueryTooSlow` once the block has taken `seconds`
        (SQLite's progress handler looks at the clock every `BUDGET_CHECK_STEPS` steps: a
        query stops a fraction of a second past the deadline); None sets no limit."""
        if seconds is None:
            yield
            return
        deadline = time.monotonic() + seconds
        self.db.set_progress_handler(lambda: time.monotonic() > deadline, BUDGET_CHECK_STEPS)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if not interrupted(exc):
                raise
            raise QueryTooSlow(
                f"the query took longer than its budget of {seconds:g} s and was stopped"
            ) from None
        finally:
            self.db.set_progress_handler(None, 0)

    def _is_empty(self) -> bool:
        return self.db.execute("SELECT NOT EXISTS (SELECT 1 FROM trajectories)").fetchone()[0]

    def _journal_mode(self, mode: str) -> str:
        """Switch the journal mode if SQLite can at once (no other connection in the way);
        returns the mode now in force. (Every `Store` opens in WAL mode again.)"""
        if not self._depth and str(self.path) != ":memory:":
            self.db.execute("PRAGMA busy_timeout=0")
            try:
                self.db.execute(f"PRAGMA journal_mode={mode}").fetchone()
            except sqlite3.OperationalError:
                pass  # another connection has the file open: keep the mode in force
            finally:
                self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return self.db.execute("PRAGMA journal_mode").fetchone()[0]

    def add(self, traj: Trajectory) -> bool:
        """Insert unless a trajectory with the same id exists; True when inserted."""
        return self.add_encoded(encode(traj))

    def add_encoded(self, encoded: EncodedTrajectory) -> bool:
        """`add` for a trajectory already serialized by `encode()`: the document is stored
        as it is, not parsed again (only checked to open with the row's id and version)."""
        _checked(encoded)
        with self.transaction():
            cursor = self.db.execute(
                f"INSERT OR IGNORE INTO trajectories ({_COLUMNS}) VALUES ({_placeholders()})",
                (*encoded.row, time.time(), encoded.document),
            )
            added = cursor.rowcount == 1
            if added:
                self._index(cursor.lastrowid, encoded.search)
        return added

    def add_many(self, trajs: Iterable[Trajectory]) -> tuple[int, int]:
        """Insert all in one transaction; returns (added, duplicates)."""
        added = duplicates = 0
        with self.transaction():
            for traj in trajs:
                if self.add(traj):
                    added += 1
                else:
                    duplicates += 1
        return added, duplicates

    def put(self, traj: Trajectory) -> None:
        """Insert or replace (for trajectories that grow, such as live proxy sessions)."""
        if not traj.id:
            raise ValueError("put() needs a trajectory with an id")
        with self.transaction():
            old_rows = "SELECT rowid FROM trajectories WHERE id = ?"
            self._forget_pending({rowid for (rowid,) in self.db.execute(old_rows, (traj.id,))})
            self.db.execute(f"DELETE FROM run_search WHERE rowid IN ({old_rows})", (traj.id,))
            cursor = self.db.execute(
                f"INSERT OR REPLACE INTO trajectories ({_COLUMNS}) VALUES ({_placeholders()})",
                (*_row_values(traj), time.time(), _to_json(traj)),
            )
            self._index(cursor.lastrowid, run_search_text(traj))

    def rewrite(self, traj: Trajectory) -> None:
        """Replace a stored run's document and columns in place: same id, row and
        `created_at` (listings keep their order), full-text row written again."""
        found = self.db.execute("SELECT rowid FROM trajectories WHERE id = ?", (traj.id,))
        row = found.fetchone()
        if row is None:
            raise UserError(f"no trajectory with id '{traj.id}' in {self.path}")
        names = [c.strip() for c in _COLUMNS.split(",")]
        values = dict(zip(names, (*_row_values(traj), None, _to_json(traj)), strict=True))
        del values["id"], values["created_at"]
        assignments = ", ".join(f"{name} = ?" for name in values)
        with self.transaction():
            self.db.execute(
                f"UPDATE trajectories SET {assignments} WHERE id = ?", (*values.values(), traj.id)
            )
            self._forget_pending({row[0]})
            self.db.execute("DELETE FROM run_search WHERE rowid = ?", (row[0],))
            self._index(row[0], run_search_text(traj))

    def _index(self, rowid: int | None, search: RunSearchText) -> None:
        """Write the run's full-text index row (same rowid as its `trajectories` row), or
        hold it back until the commit (see `_index_at_commit`)."""
        if self._defer_index and self._depth:
            self._pending_index.append((rowid, search))
            self._pending_chars += len(search.body)
            mark = self._savepoints[-1] if self._savepoints else _PendingMark()
            if self._pending_chars - mark.chars > PENDING_INDEX_CHARS:
                self._write_pending_index(mark)  # a big file: its own rows so far
        else:
            self._write_index(rowid, search)

    def _write_pending_index(self, mark: _PendingMark | None = None) -> None:
        """Write the held-back rows from `mark` on (inside a savepoint: only its own rows,
        so that they are undone with it; the rows of earlier files wait for the commit)."""
        mark = mark or _PendingMark()
        for rowid, search in self._pending_index[mark.rows :]:
            if search is not None:
                self._write_index(rowid, search)
        self._cut_pending(mark)

    def _cut_pending(self, mark: _PendingMark) -> None:
        """Keep only the held-back rows before `mark`."""
        del self._pending_index[mark.rows :]
        self._pending_chars = mark.chars
        self._forgotten = [f for f in self._forgotten if f[0] < mark.rows]

    def _undo_pending(self, mark: _PendingMark) -> None:
        """Back to `mark`, as a rolled-back savepoint leaves the store: its rows dropped and
        the earlier rows it set to None (a run it replaced or deleted) restored."""
        for position, row in self._forgotten[mark.forgotten :]:
            if position < mark.rows:
                self._pending_index[position] = row
        del self._forgotten[mark.forgotten :]
        self._cut_pending(mark)

    def _write_index(self, rowid: int | None, search: RunSearchText) -> None:
        self.db.execute("DELETE FROM run_search WHERE rowid = ?", (rowid,))
        self.db.execute(
            "INSERT INTO run_search(rowid, body, labels, faults) VALUES (?, ?, ?, ?)",
            (rowid, *search),
        )

    def delete(self, traj_id: str) -> None:
        with self.transaction():
            cursor = self.db.execute(
                "DELETE FROM trajectories WHERE id = ? RETURNING rowid", (traj_id,)
            )
            self._forget_pending({rowid for (rowid,) in cursor.fetchall()})

    def _forget_pending(self, rowids: set[int]) -> None:
        """Drop held-back index rows of runs replaced or deleted in this transaction."""
        if not rowids:
            return
        for position, row in enumerate(self._pending_index):
            if row[0] in rowids and row[1] is not None:  # kept in place: marks count positions
                self._forgotten.append((position, row))
                self._pending_index[position] = (row[0], None)

    def resolve_id(self, prefix: str) -> str:
        """The full id for an id or unique prefix; UserError when none or several match."""
        rows = self.db.execute(
            "SELECT id FROM trajectories WHERE id LIKE ? LIMIT 3", (f"{prefix}%",)
        ).fetchall()
        if not rows:
            raise UserError(f"no trajectory with id '{prefix}' in {self.path}")
        if len(rows) > 1 and rows[0][0] != prefix:
            raise UserError(f"id prefix '{prefix}' is ambiguous; give more characters")
        return rows[0][0]

    def outcome(self, traj_id: str) -> Outcome | None:
        """The stored outcome of the trajectory with this exact id (read without decoding the
        whole document), or None when there is none."""
        row = self.db.execute(
            "SELECT json_extract(CAST(doc AS TEXT), '$.outcome') FROM trajectories WHERE id = ?",
            (traj_id,),
        ).fetchone()
        return None if row is None else Outcome.model_validate_json(row[0] or "{}")

    def get(self, traj_id: str) -> Trajectory:
        full_id = self.resolve_id(traj_id)
        (doc,) = self.db.execute("SELECT doc FROM trajectories WHERE id = ?", (full_id,)).fetchone()
        return _decode(doc)

    def query(self, flt: TrajectoryFilter | None = None) -> Iterator[Trajectory]:
        """Trajectories matching the filter, in insertion order."""
        sql, params = self._select("doc", flt)
        for (doc,) in self.db.execute(sql, params):
            yield _decode(doc)

    def documents(self, flt: TrajectoryFilter | None = None) -> Iterator[bytes]:
        """The stored JSON documents matching the filter, as stored (not decoded)."""
        sql, params = self._select("doc", flt)
        for (doc,) in self.db.execute(sql, params):
            yield doc

    def document_sizes(self, flt: TrajectoryFilter | None = None) -> Iterator[tuple[int, int]]:
        """(rowid, bytes of the document) of the runs matching the filter, in rowid order
        (the documents themselves are not read)."""
        sql, params = self._select("rowid, length(doc)", flt)
        yield from self.db.execute(sql, params)

    def documents_at(self, rowids: Sequence[int]) -> list[bytes]:
        """The stored documents of these rows (a few thousand at most), in rowid order."""
        marks = ", ".join("?" * len(rowids))
        sql = f"SELECT doc FROM trajectories WHERE rowid IN ({marks}) ORDER BY rowid"
        return [doc for (doc,) in self.db.execute(sql, list(rowids))]

    def column_batches(
        self,
        columns: Sequence[str],
        flt: TrajectoryFilter | None = None,
        max_rows: int = 500,
        max_bytes: int = 4_000_000,
    ) -> Iterator[list[tuple]]:
        """Values of stored columns (`doc`: the document's JSON bytes; `search_text`: the text
        the full-text index holds for the run), in batches of at most `max_rows` rows or about
        `max_bytes` of documents, so memory stays bounded."""
        unknown = set(columns) - set(_COLUMNS.replace(" ", "").split(",")) - {"search_text"}
        if unknown:
            raise ValueError(f"unknown trajectory columns: {sorted(unknown)}")
        fields = [_SEARCH_TEXT if column == "search_text" else column for column in columns]
        sql, params = self._select(", ".join(fields), flt)
        batch: list[tuple] = []
        size = 0
        doc_at = columns.index("doc") if "doc" in columns else None
        for values in self.db.execute(sql, params):
            batch.append(values)
            size += 0 if doc_at is None else len(values[doc_at])
            if len(batch) >= max_rows or size >= max_bytes:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def rows(self, flt: TrajectoryFilter | None = None) -> list[TrajectoryRow]:
        """Summary rows matching the filter, without decoding the documents."""
        return list(self.iter_rows(flt))

    def iter_rows(self, flt: TrajectoryFilter | None = None) -> Iterator[TrajectoryRow]:
        """The same rows as `rows`, read as they are consumed (listings of any length in
        bounded memory). Do not write to the store before the iteration ends."""
        sql, params = self._select(", ".join(TrajectoryRow._fields), flt)
        success = TrajectoryRow._fields.index("success")
        for values in self.db.execute(sql, params):
            if values[success] is not None:  # SQLite keeps booleans as 0 / 1
                values = (*values[:success], bool(values[success]), *values[success + 1 :])
            yield TrajectoryRow(*values)

    def episodes(self, harness: str, env: str) -> dict[str, tuple[str, str | None]]:
        """Episode key -> (trajectory id, termination reason) of the runs `harness` stored
        for environment `env` (the `episode_key` and `env` of their metadata)."""
        rows = self.db.execute(
            "SELECT episode_key, id, termination_reason FROM trajectories "
            "WHERE harness = ? AND episode_env = ? AND episode_key IS NOT NULL",
            (harness, env),
        )
        return {key: (traj_id, reason) for key, traj_id, reason in rows if key}

    def query_plan(self, flt: TrajectoryFilter | None = None) -> list[str]:
        """How SQLite reads the rows a filter selects (`EXPLAIN QUERY PLAN` details)."""
        sql, params = self._select("id", flt)
        return [row[-1] for row in self.db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]

    def check_search(self, q: str) -> None:
        """A `UserError` that says how to write the query when FTS5 cannot parse `q`."""
        try:
            self.db.execute(CHECK_SEARCH_SQL, (q,)).fetchone()
        except sqlite3.OperationalError as exc:
            if interrupted(exc):
                raise
            raise UserError(
                f"search query {q!r} is not valid: {str(exc).removeprefix('fts5: ')}. Write "
                'words, "quoted phrases", AND / OR / NOT, or prefix*; put text with symbols in '
                'double quotes (for example "#W2378156")'
            ) from None

    def count(self, flt: TrajectoryFilter | None = None) -> int:
        """How many runs `query(flt)` yields (its limit included)."""
        flt = flt or TrajectoryFilter()
        where, params = self.checked_where(flt)
        found = self.db.execute(f"SELECT COUNT(*) FROM trajectories{where}", params).fetchone()[0]
        return found if flt.limit is None else min(found, flt.limit)

    def checked_where(self, flt: TrajectoryFilter) -> tuple[str, list]:
        """The filter's WHERE clause, its search checked first (`check_search`)."""
        if flt.text is not None:
            self.check_search(flt.text)
        return flt.where()

    def _select(self, fields: str, flt: TrajectoryFilter | None) -> tuple[str, list]:
        flt = flt or TrajectoryFilter()
        where, params = self.checked_where(flt)
        sql = f"SELECT {fields} FROM trajectories{where} ORDER BY rowid"
        if flt.limit is not None:
            sql += f" LIMIT {int(flt.limit)}"
        return sql, params


SQLITE_FULL = 13


def _disk_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == SQLITE_FULL


def interrupted(exc: sqlite3.Error) -> bool:
    """Whether SQLite stopped a statement on request (a time budget), not for a fault of its own."""
    return isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted"


def _prepare(db: sqlite3.Connection, path: Path) -> None:
    """Settings of every connection, then the schema brought up to date."""
    db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    check_is_trajforge(db, path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    migrate(db)


def _to_json(traj: Trajectory) -> bytes:
    return traj.__pydantic_serializer__.to_json(traj)


def _placeholders() -> str:
    return ", ".join("?" for _ in _COLUMNS.split(","))


def _decode(doc: bytes) -> Trajectory:
    traj = Trajectory.model_validate_json(doc)
    if traj.format_version > FORMAT_VERSION:
        raise UserError(
            f"trajectory {traj.id} has format version {traj.format_version}, newer than "
            f"this trajforge ({FORMAT_VERSION}); upgrade trajforge"
        )
    return traj

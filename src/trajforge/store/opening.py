"""Opening a store file safely: refuse what is not a trajforge store before writing to it."""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from trajforge.errors import UserError

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_BUSY = 5
RETRY_PAUSE_S = (0.005, 0.05)


_HELD: Counter[tuple[int, int]] = Counter()
"""(device, inode) of the store files this process has open, with their connection counts."""
_HELD_LOCK = threading.Lock()


def hold(path: Path) -> tuple[int, int]:
    """Count a connection to the store file at `path` as open in this process."""
    info = path.stat()
    key = (info.st_dev, info.st_ino)
    with _HELD_LOCK:
        _HELD[key] += 1
    return key


def release(key: tuple[int, int]) -> None:
    """The connection counted by `hold` is closed."""
    with _HELD_LOCK:
        _HELD[key] -= 1
        if _HELD[key] <= 0:
            del _HELD[key]


def _held(info: os.stat_result) -> bool:
    with _HELD_LOCK:
        return (info.st_dev, info.st_ino) in _HELD


def check_store_path(path: Path) -> None:
    """Raise a one-line `UserError` unless `path` can be (or become) a store file.

    A missing file in an existing folder is fine (a new store); an existing one must be a
    regular file that is empty or an SQLite database whose size matches its header (a
    truncated copy is refused before SQLite reports it half-way through a command).

    The header is not read when this process already has the file open through a `Store`:
    closing any descriptor of a file drops every POSIX lock the process holds on it, so
    reading it with a handle of our own would silently release the locks of the SQLite
    connections already open here, and another process could then check-point or write
    under them (other connections read pages half-written: "disk I/O error", "database disk
    image is malformed"). The file was checked when the first of those connections opened.
    """
    if not str(path) or str(path) == ".":
        raise UserError("the store path is empty; give a file such as trajforge.db")
    try:
        info = path.stat()
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise UserError(f"store folder does not exist: {path.parent}") from None
        return
    except OSError as exc:
        raise UserError(f"{path}: cannot use as a store: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path}: is a folder, not a store file")
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path}: is not a regular file, cannot be a store")
    if info.st_size and not _held(info):
        _check_header(path, info.st_size)


def _check_header(path: Path, size: int) -> None:
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the store: {exc.strerror}") from None
    if not header.startswith(SQLITE_HEADER):
        raise UserError(f"{path}: not a trajforge store (not an SQLite database)")
    if len(header) < 100:
        raise UserError(f"{path}: store file is truncated ({size} bytes)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid_count = header[24:28] == header[92:96]
    if valid_count and pages and size < pages * page_size and not _wal_in_use(path):
        raise UserError(
            f"{path}: store file is truncated ({size} bytes; its header says {pages * page_size})"
        )


def check_is_trajforge(db: sqlite3.Connection, path: Path) -> None:
    """Refuse an SQLite database made by something else (no schema version, but tables).

    Both are read in one statement, so one snapshot: read apart, another process creating
    the store could commit its schema between them (version 0, then tables)."""
    version, tables = db.execute(
        "SELECT (SELECT user_version FROM pragma_user_version),"
        " (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if not version and tables:
        raise UserError(f"{path}: an SQLite database that is not a trajforge store")


def store_error(path: Path, exc: sqlite3.Error) -> UserError:
    """A one-line error for an SQLite failure while opening the store at `path`."""
    return UserError(f"{path}: cannot open the store: {exc}")


def _wal_in_use(path: Path) -> bool:
    """Whether the store has a write-ahead log beside it: another connection may then be
    copying the log into the file, which writes the header's new page count before the
    pages past the old end (the file is not truncated, only half-way through growing)."""
    return path.with_name(path.name + "-wal").exists()


def open_store(
    path: Path, prepare: Callable[[sqlite3.Connection, Path], None], patience_s: float
) -> sqlite3.Connection:
    """A connection to `path` made ready by `prepare` (settings, schema), tried again while
    SQLite says the file is busy, for up to `patience_s` seconds.

    The busy timeout does not cover every case: when two processes create the same new store
    at once, one holding a read lock while it asks for the write lock, SQLite answers "database
    is locked" at once rather than let both wait for ever. Opening is all or nothing (the
    schema is written in one transaction), so it can simply start again."""
    deadline = time.monotonic() + patience_s
    while True:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            prepare(db, path)
            return db
        except sqlite3.Error as exc:
            db.close()
            if not (_busy(exc) and time.monotonic() < deadline):
                raise store_error(path, exc) from None
        except BaseException:
            db.close()
            raise
        time.sleep(random.uniform(*RETRY_PAUSE_S))


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == SQLITE_BUSY

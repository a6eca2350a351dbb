"""Opening a store file safely: refuse what is not a trajforge store before writing to it."""

from __future__ import annotations

import random
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

from trajforge.errors import UserError

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_BUSY = 5
RETRY_PAUSE_S = (0.005, 0.05)


def check_store_path(path: Path) -> None:
    """Raise a one-line `UserError` unless `path` can be (or become) a store file.

    A missing file in an existing folder is fine (a new store); an existing one must be a
    regular file that is empty or an SQLite database whose size matches its header (a
    truncated copy is refused before SQLite reports it half-way through a command).
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
    if info.st_size:
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
    if valid_count and pages and size < pages * page_size:
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

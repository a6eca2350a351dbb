"""Checkpoint directories written atomically: built aside, synced, then renamed into place.

`write_directory(final, fill)` has `fill` write everything into a new directory beside
`final` (`.NAME.PID-RANDOM.partial`), flushes every file and directory to disk, and only then
puts it in place: by `rename` when `final` does not exist yet, by an atomic exchange of the
two directories when it does (Linux `renameat2(RENAME_EXCHANGE)`), after which the old one is
removed. Whatever fails or is killed on the way (a full disk, an exception in `fill`, kill -9),
`final` is either the old directory, whole, or the new one, whole.

Where the exchange is not available, the old directory is first renamed to `.NAME.previous`;
`restore_previous(final)` puts it back if the process died between the two renames.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from trajforge.processes import process_running

_EXCHANGE = 2  # RENAME_EXCHANGE
_AT_FDCWD = -100
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV}


def write_directory(final: Path, fill: Callable[[Path], None]) -> Path:
    """Build `final` with `fill(staging)` and put it in place atomically; returns `final`."""
    final = final.absolute()
    final.parent.mkdir(parents=True, exist_ok=True)
    restore_previous(final)
    _remove_stale(final)
    staging = final.with_name(f".{final.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    staging.mkdir()
    try:
        fill(staging)
        _sync_tree(staging)
        _put_in_place(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the new one if it failed, else the old one
    _sync(final.parent)
    return final


def restore_previous(final: Path) -> None:
    """Put back the old directory a writer without the exchange left aside before dying."""
    previous = _previous(final)
    if previous.is_dir() and not final.exists():
        previous.rename(final)


def _previous(final: Path) -> Path:
    return final.with_name(f".{final.name}.previous")


def _put_in_place(staging: Path, final: Path) -> None:
    if not final.exists():
        staging.rename(final)
    elif not _exchange(staging, final):
        previous = _previous(final)
        shutil.rmtree(previous, ignore_errors=True)
        final.rename(previous)
        staging.rename(final)
        shutil.rmtree(previous)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step; False where the system or filesystem cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(b))


def _sync_tree(root: Path) -> None:
    """fsync every file and directory under `root`, files first."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            _sync(Path(folder, name))
        _sync(Path(folder))


def _sync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove_stale(final: Path) -> None:
    """Remove the staging directories of writers of `final` that no longer run."""
    for path in final.parent.glob(f".{final.name}.*.partial"):
        pid = path.name[len(final.name) + 2 :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)

"""The build cache: where built things live, and how they appear there all at once.

Everything in the cache is content-addressed (a hash of what made it) and made in a
temporary folder beside its final place, then renamed there when complete; a lock per
name keeps two processes from making the same thing at once. A process killed in the
middle (kill -9) leaves only its temporary folder, which is never used and is removed by the
next build of the same name.

The cache is `$TRAJFORGE_SWE_BENCH_CACHE`, else `~/.cache/trajforge/swe-bench`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

CACHE_ENV = "TRAJFORGE_SWE_BENCH_CACHE"
COMPLETE = "complete.json"
"""Written last inside a built folder: its presence means the folder is whole."""


def cache_dir(explicit: str | Path | None = None) -> Path:
    folder = explicit or os.environ.get(CACHE_ENV) or Path.home() / ".cache/trajforge/swe-bench"
    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(*parts: bytes) -> str:
    """A short hash of the parts (16 hex digits)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (a file beside the thing it guards)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file()


def build_once(final: Path, make: Callable[[Path], None]) -> bool:
    """Make `final` with `make(temporary folder)` unless it is already complete.

    `make` must write `COMPLETE` last. Returns True when this call made it. Leftovers of
    killed builds of the same name are removed first (the lock says nobody else is at it)."""
    if is_complete(final):
        return False
    with locked(final.parent / f".{final.name}.lock"):
        if is_complete(final):
            return False
        for stale in final.parent.glob(f".tmp-{final.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # a folder without its completion mark: never used
            shutil.rmtree(final)
        temporary = final.parent / f".tmp-{final.name}-{os.getpid()}"
        temporary.mkdir(parents=True)
        try:
            make(temporary)
            if not is_complete(temporary):
                raise RuntimeError(f"build of {final.name} ended without {COMPLETE}")
            temporary.rename(final)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    return True

"""Writing output files safely: checked paths, a temporary file renamed into place.

Every command that writes a file goes through `atomic_output`: the target is checked first
(a folder, a device such as `/dev/full`, a FIFO or the store itself is refused with one
line; missing folders are created), the data is written to a temporary file in the
target's folder and renamed over the target only once complete, with the permissions of an
ordinary new file (0644 under the usual umask). A failed write leaves the old file, if any,
as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from trajforge.errors import UserError

FILE_MODE = 0o666


def check_output_path(out: Path, protected: Iterable[Path] = ()) -> None:
    """Raise a one-line `UserError` unless `out` can be replaced by a new regular file.

    `protected` are files that must never be overwritten (the store being read, with its
    `-wal` and `-shm` companions).
    """
    if not str(out) or str(out) == ".":
        raise UserError("the output path is empty")
    try:
        info = out.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UserError(f"{out}: cannot write: {exc.strerror}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise UserError(f"{out}: is a folder; give a file name")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UserError(f"{out}: is not a regular file (a device, FIFO or socket); not replaced")
    for kept in protected:
        if _same_file(out, kept):
            raise UserError(f"{out}: is the store being read; write to another file")
    if out.parent.exists() and not out.parent.is_dir():
        raise UserError(f"{out}: {out.parent} is not a folder")


def _same_file(out: Path, kept: Path) -> bool:
    names = [kept, kept.with_name(kept.name + "-wal"), kept.with_name(kept.name + "-shm")]
    for name in names:
        try:
            if os.path.samefile(out, name):
                return True
        except OSError:
            pass
        if os.path.abspath(out) == os.path.abspath(name):
            return True
    return False


@contextmanager
def atomic_output(out: Path, protected: Iterable[Path] = ()) -> Iterator[Path]:
    """A temporary path beside `out` that replaces `out` when the block succeeds."""
    check_output_path(out, protected)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise UserError(f"{out}: cannot write in {out.parent}: {exc.strerror}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, FILE_MODE & ~_umask())
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"{out}: cannot write: {exc.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_folder(out: Path, replaceable: str = "*") -> Iterator[Path]:
    """A temporary folder beside `out` that takes its place when the block succeeds.

    An existing `out` is replaced only when it is a folder whose entries all match the glob
    `replaceable` (a previous export's files); anything else in it is a `UserError`, and a
    failed block leaves `out` as it was.
    """
    _check_replaceable_folder(out, replaceable)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise UserError(f"{out}: cannot write in {out.parent}: {exc.strerror}") from None
    try:
        yield tmp
        for path in tmp.iterdir():
            os.chmod(path, FILE_MODE & ~_umask())
        os.chmod(tmp, 0o777 & ~_umask())
        _swap_in(tmp, out)
    except OSError as exc:
        raise UserError(f"{out}: cannot write: {exc.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_replaceable_folder(out: Path, replaceable: str) -> None:
    if not str(out) or str(out) == ".":
        raise UserError("the output path is empty")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; give a folder for the files")
    if out.is_dir():
        others = [p.name for p in out.iterdir() if not p.match(replaceable)]
        if others:
            raise UserError(
                f"{out} holds other files than {replaceable} ({others[0]}, ...); give an empty "
                "or new folder"
            )


def _swap_in(new: Path, out: Path) -> None:
    """Put the folder `new` at `out`, the folder there before (if any) deleted after."""
    if not out.exists():
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(new, out)
    shutil.rmtree(old)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

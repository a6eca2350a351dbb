"""Reading (possibly gzipped) JSON and JSONL files; errors name the file and line."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import orjson

from trajforge.errors import InputError

READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a file can raise: the file system, a gzip stream cut short (EOFError) or
corrupt (a bad header is an OSError, a bad compressed block a `zlib.error`)."""


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open a file for reading bytes, decompressing `.gz` transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


COMPRESSED_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\x04\x22\x4d\x18": "lz4",
    b"PK\x03\x04": "zip",
    b"7z\xbc\xaf\x27\x1c": "7z",
}
"""How compressed files begin (only gzip, named `.gz`, is decompressed when read)."""


def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes show, or None."""
    return next((name for magic, name in COMPRESSED_MAGIC.items() if head.startswith(magic)), None)


def base_name(path: Path) -> str:
    """The file name without a trailing `.gz`."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def load_json(path: Path) -> object:
    """Parse a whole (possibly gzipped) JSON file; malformed JSON names the file and position."""
    try:
        with open_binary(path) as handle:
            data = handle.read()
    except READ_ERRORS as exc:
        raise InputError(str(path), f"cannot read file: {exc}") from exc
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"malformed JSON: {exc}") from exc


def load_json_records(path: Path) -> object:
    """A `.jsonl` file as a list of its lines' values, any other file as one JSON value."""
    if base_name(path).endswith(".jsonl"):
        return [record for _, record in iter_jsonl(path)]
    return load_json(path)


class LineRange(NamedTuple):
    """Whole lines of a file: its bytes from `start` up to `stop` (None: to the end), the
    first of them numbered `first_line` (None: not counted; they are then numbered from 1
    within the range)."""

    start: int = 0
    stop: int | None = None
    first_line: int | None = 1


WHOLE_FILE = LineRange()


def iter_jsonl(path: Path, lines: LineRange = WHOLE_FILE) -> Iterator[tuple[int, object]]:
    """(line number, parsed object) for each non-empty line of a JSONL file (of `lines` of it)."""
    first = lines.first_line or 1
    number = first - 1
    left = None if lines.stop is None else lines.stop - lines.start
    with open_binary(path) as handle:
        try:
            handle.seek(lines.start)
            for number, line in enumerate(handle, start=first):
                if left is not None:
                    if left <= 0:
                        break
                    left -= len(line)
                if line.strip():
                    yield number, _parse_line(path, number, line)
        except READ_ERRORS as exc:
            raise InputError(str(path), f"cannot read file: {exc}", f"line {number + 1}") from exc


SEEK_BLOCK = 65536


def line_ranges(path: Path, size: int) -> list[LineRange]:
    """A file cut into ranges of whole lines of at least `size` bytes (the last may be
    shorter; one range for an empty file). Reads only from each cut to the next line end,
    so lines are not counted: past the first range, `first_line` is None (`lines_before`
    counts them when a message needs them)."""
    ranges: list[LineRange] = []
    start = 0
    with path.open("rb") as handle:
        total = os.fstat(handle.fileno()).st_size
        while start + size < total:
            end = _line_end(handle, start + size - 1)
            if end is None:
                break
            ranges.append(LineRange(start, end, None if ranges else 1))
            start = end
    if start < total or not ranges:
        ranges.append(LineRange(start, None, None if ranges else 1))
    return ranges


def _line_end(handle: io.BufferedReader, position: int) -> int | None:
    """Where the line that holds byte `position` ends (past its newline); None: at the end
    of the file, with no newline."""
    handle.seek(position)
    while block := handle.read(SEEK_BLOCK):
        cut = block.find(b"\n")
        if cut >= 0:
            return position + cut + 1
        position += len(block)
    return None


def lines_before(path: Path, offset: int) -> int:
    """How many lines end in the first `offset` bytes of a file (reads them, at C speed)."""
    count = 0
    with path.open("rb") as handle:
        while offset > 0 and (block := handle.read(min(offset, 8_000_000))):
            count += block.count(b"\n")
            offset -= len(block)
    return count


def forget_cached(path: Path, lines: LineRange = WHOLE_FILE) -> None:
    """Tell the system that `lines` of `path` will not be read again: their pages leave the
    page cache now, instead of pushing out pages that will be (an import reads each file
    once; at 100 times the shared data, its files and the store it writes no longer fit in
    memory together). Does nothing where the system takes no such advice."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        length = 0 if lines.stop is None else lines.stop - lines.start  # 0: to the end
        os.posix_fadvise(handle, lines.start, length, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # advice only
    finally:
        os.close(handle)


def _parse_line(path: Path, number: int, line: bytes) -> object:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"malformed JSON: {exc}", f"line {number}") from exc

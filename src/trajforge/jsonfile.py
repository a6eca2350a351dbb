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
    first of them numbered `first_line`."""

    start: int = 0
    stop: int | None = None
    first_line: int = 1


WHOLE_FILE = LineRange()


def iter_jsonl(path: Path, lines: LineRange = WHOLE_FILE) -> Iterator[tuple[int, object]]:
    """(line number, parsed object) for each non-empty line of a JSONL file (of `lines` of it)."""
    number = lines.first_line - 1
    left = None if lines.stop is None else lines.stop - lines.start
    with open_binary(path) as handle:
        try:
            handle.seek(lines.start)
            for number, line in enumerate(handle, start=lines.first_line):
                if left is not None:
                    if left <= 0:
                        break
                    left -= len(line)
                if line.strip():
                    yield number, _parse_line(path, number, line)
        except READ_ERRORS as exc:
            raise InputError(str(path), f"cannot read file: {exc}", f"line {number + 1}") from exc


def line_ranges(path: Path, size: int) -> list[LineRange]:
    """A file cut into ranges of whole lines of at least `size` bytes (the last may be
    shorter; one range for an empty file). Reads the file once, counting lines at C speed."""
    ranges: list[LineRange] = []
    start, first_line = 0, 1  # where the current range begins, and its first line's number
    position, newlines = 0, 0  # the block's offset in the file, and the newlines before it
    with path.open("rb") as handle:
        while block := handle.read(size):
            reach = start + size - 1 - position  # where in the block the range reaches `size`
            cut = block.find(b"\n", max(0, reach)) if reach < len(block) else -1
            if cut >= 0:
                end = position + cut + 1
                ranges.append(LineRange(start, end, first_line))
                start, first_line = end, newlines + block.count(b"\n", 0, cut + 1) + 1
            newlines += block.count(b"\n")
            position += len(block)
    if start < position or not ranges:
        ranges.append(LineRange(start, None, first_line))
    return ranges


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

"""The importer protocol and file helpers shared by importers."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

import orjson

from trajforge.errors import InputError
from trajforge.schema import Trajectory

HEAD_BYTES = 65536


class Importer(Protocol):
    """Reads one file format into trajectories.

    `name` is the format name users see; `detect` decides from the path and the file's
    first (decompressed) bytes; `read` yields trajectories and raises `InputError` naming
    the file and record on malformed input; `sidecars` names companion files that this
    importer consumes (for example SWE-bench verdicts next to a run).
    """

    name: str
    description: str

    def detect(self, path: Path, head: bytes) -> bool: ...

    def read(self, path: Path) -> Iterator[Trajectory]: ...

    def sidecars(self, path: Path) -> list[Path]: ...


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, decompressing `.gz` transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of a (possibly gzipped) file."""
    try:
        with open_binary(path) as handle:
            return handle.read(size)
    except (OSError, EOFError) as exc:
        raise InputError(str(path), f"cannot read file: {exc}") from exc


def base_name(path: Path) -> str:
    """The file name without a trailing `.gz`."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def load_json(path: Path) -> object:
    """Parse a whole (possibly gzipped) JSON file; malformed JSON names the file and position."""
    try:
        with open_binary(path) as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:
        raise InputError(str(path), f"cannot read file: {exc}") from exc
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"malformed JSON: {exc}") from exc


def iter_jsonl(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed object) for each non-empty line of a JSONL file."""
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InputError(str(path), f"malformed JSON: {exc}", f"line {number}") from exc


def first_json_line(head: bytes) -> object | None:
    """The first line of `head` parsed as JSON, or None."""
    line = head.split(b"\n", 1)[0].strip()
    if not line:
        return None
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


STREAM_THRESHOLD = 32 * 1024 * 1024


def iter_json_array(path: Path, prefix: str = "item") -> Iterator[tuple[int, object]]:
    """(index, record) for each element of a JSON array (at `prefix`, ijson syntax).

    Files above `STREAM_THRESHOLD` are parsed incrementally so memory stays near the size of
    one record; smaller files are parsed at once, which is faster.
    """
    if path.stat().st_size <= STREAM_THRESHOLD:
        data = load_json(path)
        for key in prefix.split(".")[:-1] if prefix != "item" else []:
            data = data.get(key) if isinstance(data, dict) else None
        if not isinstance(data, list):
            raise InputError(str(path), f"expected a JSON array at '{prefix}'")
        yield from enumerate(data)
        return
    yield from _stream_array(path, prefix)


def _stream_array(path: Path, prefix: str) -> Iterator[tuple[int, object]]:
    import ijson

    index = -1
    with open_binary(path) as handle:
        try:
            for index, record in enumerate(ijson.items(handle, prefix, use_float=True)):
                yield index, record
        except ijson.JSONError as exc:
            raise InputError(str(path), f"malformed JSON: {exc}", index + 1) from exc


def split_extra(record: dict, known: set[str]) -> tuple[dict, dict]:
    """(known fields, the rest) of a record."""
    kept = {k: v for k, v in record.items() if k in known}
    rest = {k: v for k, v in record.items() if k not in known}
    return kept, rest

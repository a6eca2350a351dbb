"""Reading (possibly gzipped) JSON and JSONL files; errors name the file and line."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path

import orjson

from trajforge.errors import InputError


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open a file for reading bytes, decompressing `.gz` transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


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


def load_json_records(path: Path) -> object:
    """A `.jsonl` file as a list of its lines' values, any other file as one JSON value."""
    if base_name(path).endswith(".jsonl"):
        return [record for _, record in iter_jsonl(path)]
    return load_json(path)


def iter_jsonl(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed object) for each non-empty line of a JSONL file."""
    number = 0
    with open_binary(path) as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, _parse_line(path, number, line)
        except (OSError, EOFError) as exc:
            raise InputError(str(path), f"cannot read file: {exc}", f"line {number + 1}") from exc


def _parse_line(path: Path, number: int, line: bytes) -> object:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"malformed JSON: {exc}", f"line {number}") from exc

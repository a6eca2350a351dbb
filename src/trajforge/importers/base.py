"""The importer protocol and file helpers shared by importers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import orjson
from pydantic import ValidationError

from trajforge.errors import InputError, UserError, first_error
from trajforge.jsonfile import (  # noqa: F401 (re-exported for importers)
    READ_ERRORS,
    WHOLE_FILE,
    LineRange,
    base_name,
    iter_jsonl,
    load_json,
    load_json_records,
    open_binary,
)
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


@runtime_checkable
class ReadsLineRanges(Protocol):
    """An importer of one run per line that reads part of a file (`iter_jsonl(path,
    lines)`), so that workers can share a big file."""

    def read_lines(self, path: Path, lines: LineRange) -> Iterator[Trajectory]: ...


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of a (possibly gzipped) file."""
    try:
        with open_binary(path) as handle:
            return handle.read(size)
    except READ_ERRORS as exc:
        raise InputError(str(path), f"cannot read file: {exc}") from exc


SKELETON_ITEMS = 3
SKELETON_TEXT = 200


def read_skeleton(path: Path) -> bytes | None:
    """The structure of a JSON file too long for its head to show it all, or None.

    Detection looks for keys and markers in a file's first bytes; when a long value comes
    first (a Who&When `history` before `question_ID`) the keys that say what the file is
    lie beyond the head. The skeleton is the whole document with every string cut to
    `SKELETON_TEXT` characters and every array to its first `SKELETON_ITEMS` items, written
    back as JSON: every key of the file's top levels is in it, whatever its position (the
    values after an object's first `SKELETON_KEYS` are left out). Files that are not one
    JSON document (or not readable) give None.
    """
    try:
        data = _skeleton(load_json_for_detection(path), 0)
    except (InputError, RecursionError):
        return None
    try:
        return orjson.dumps(data, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return None


def load_json_for_detection(path: Path) -> object:
    if should_stream(path):
        return _stream_document(path)
    return load_json(path)


def _stream_document(path: Path) -> object:
    import ijson

    builder = ijson.ObjectBuilder()
    with open_binary(path) as handle:
        try:
            for _prefix, event, value in ijson.parse(handle, use_float=True):
                if event == "string" and len(value) > SKELETON_TEXT:
                    value = value[:SKELETON_TEXT]
                builder.event(event, value)
        except (ijson.JSONError, *READ_ERRORS, UnicodeDecodeError) as exc:
            raise InputError(str(path), "malformed JSON") from exc
    return builder.value


SKELETON_DEPTH = 64
SKELETON_KEYS = 64
"""An object keeps all its keys, but only its first `SKELETON_KEYS` values are walked (the
others become null): a map keyed by ids (a tau-bench `reservations.json`, a tau2 `db.json`)
has thousands of records, and walking them all made detection a tenth of an import."""


def _skeleton(value: object, depth: int) -> object:
    if depth > SKELETON_DEPTH:
        return None
    if isinstance(value, dict):
        return {
            str(k): _skeleton(v, depth + 1) if i < SKELETON_KEYS else None
            for i, (k, v) in enumerate(value.items())
        }
    if isinstance(value, list):
        return [_skeleton(v, depth + 1) for v in value[:SKELETON_ITEMS]]
    if isinstance(value, str):
        return value[:SKELETON_TEXT]
    return value


def first_char(head: bytes) -> bytes:
    """The first non-whitespace byte of `head` (b"" if none), without copying all of it
    (detection asks for it of every file, for every format)."""
    start = head[:256].lstrip()[:1]
    return start or head.lstrip()[:1]


def first_json_line(head: bytes) -> object | None:
    """The first line of `head` parsed as JSON, or None."""
    line = head.split(b"\n", 1)[0].strip()
    if not line:
        return None
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def first_line_has_keys(head: bytes, *keys: str) -> bool:
    """Whether the first line of `head` is a JSON object with all `keys` at its top level.

    A first line longer than `head` cannot be parsed; then the keys are looked for as
    `"key":` in the part that was read (lines of big trajectories are often longer).
    """
    line = head.split(b"\n", 1)[0].strip()
    if not line.startswith(b"{"):
        return False
    record = first_json_line(line)
    if isinstance(record, dict):
        return all(key in record for key in keys)
    if b"\n" in head or len(head) < HEAD_BYTES:
        return False
    compact = line.replace(b'": ', b'":')
    return all(f'"{key}":'.encode() in compact for key in keys)


STREAM_THRESHOLD = 32 * 1024 * 1024
STREAM_THRESHOLD_ENV = "TRAJFORGE_STREAM_THRESHOLD"


def stream_threshold() -> int:
    """Bytes above which JSON files are parsed incrementally ($TRAJFORGE_STREAM_THRESHOLD)."""
    raw = os.environ.get(STREAM_THRESHOLD_ENV)
    if not raw:
        return STREAM_THRESHOLD
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{STREAM_THRESHOLD_ENV} must be a number of bytes, got '{raw}'") from None


def data_size(path: Path) -> int:
    """Size of the (decompressed) content: for `.gz`, the size recorded in the gzip trailer."""
    size = path.stat().st_size
    if path.suffix != ".gz" or size < 18:
        return size
    with path.open("rb") as handle:
        handle.seek(-4, os.SEEK_END)
        recorded = int.from_bytes(handle.read(4), "little")
    # The trailer holds the size modulo 2**32; a compressed file is rarely larger than that.
    return max(recorded, size)


def should_stream(path: Path) -> bool:
    return data_size(path) > stream_threshold()


def iter_json_array(path: Path, prefix: str = "item") -> Iterator[tuple[int, object]]:
    """(index, record) for each element of a JSON array (at `prefix`, ijson syntax).

    Files above `stream_threshold()` are parsed incrementally so memory stays near the size
    of one record; smaller files are parsed at once, which is faster.
    """
    if not should_stream(path):
        data = load_json(path)
        yield from enumerate(array_at(data, prefix, path))
        return
    yield from _stream_array(path, prefix)


def array_at(data: object, prefix: str, path: Path) -> list:
    """The array at an ijson-style `prefix` ("item", "simulations.item") of parsed JSON."""
    for key in prefix.split(".")[:-1]:
        data = data.get(key) if isinstance(data, dict) else None
    if not isinstance(data, list):
        raise InputError(str(path), f"expected a JSON array at '{prefix.removesuffix('.item')}'")
    return data


def _stream_array(path: Path, prefix: str) -> Iterator[tuple[int, object]]:
    import ijson

    index = -1
    with open_binary(path) as handle:
        try:
            for index, record in enumerate(ijson.items(handle, prefix, use_float=True)):
                yield index, record
        except (ijson.JSONError, *READ_ERRORS, UnicodeDecodeError) as exc:
            raise InputError(str(path), f"malformed JSON: {exc}", index + 1) from exc


def load_json_without(path: Path, skipped_key: str) -> dict:
    """A top-level JSON object parsed incrementally, leaving out one (large) key.

    Used with `iter_json_array(path, f"{skipped_key}.item")` to read the rest of a big file
    without holding the skipped array in memory. A file without that key is an `InputError`
    (else a streamed file missing its array would import as empty).
    """
    import ijson

    builder = ijson.ObjectBuilder()
    seen = False
    with open_binary(path) as handle:
        try:
            for prefix, event, value in ijson.parse(handle, use_float=True):
                if prefix == "" and event == "map_key" and value == skipped_key:
                    seen = True
                    continue
                if _under(prefix, skipped_key):
                    continue
                builder.event(event, value)
        except (ijson.JSONError, *READ_ERRORS, UnicodeDecodeError) as exc:
            raise InputError(str(path), f"malformed JSON: {exc}") from exc
    if not isinstance(builder.value, dict):
        raise InputError(str(path), "expected a JSON object")
    if not seen:
        raise InputError(str(path), f"missing field '{skipped_key}'")
    return builder.value


def _under(prefix: str, key: str) -> bool:
    return prefix == key or prefix.startswith(key + ".")


def read_one_run(path: Path, convert: Callable[[dict, Path], Trajectory]) -> Trajectory:
    """Parse a one-run JSON file and `convert(data, path)` it; errors name the file and `$`.

    Only the trajectory outlives this call: the parsed JSON is released before the caller
    stores the run, which keeps the peak memory of a big single-run file lower.
    """
    data = load_json(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    try:
        return convert(data, path)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(str(path), record_problem(exc), "$") from exc


def record_problem(exc: Exception) -> str:
    """A one-line description of why a record could not be converted."""
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    if isinstance(exc, ValidationError):
        return first_error(exc)
    return str(exc).splitlines()[0]


SHORT_VALUE = 80


def short_repr(value: object, limit: int = SHORT_VALUE) -> str:
    """`repr(value)` cut to about `limit` characters, for error messages about bad values."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}... ({len(text)} characters)"

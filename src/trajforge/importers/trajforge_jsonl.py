"""trajforge's own JSONL export: one trajectory per line (exact round trip).

A line is in the export's line shape (`store.lines`: fields other than `id` and
`format_version` as JSON text) or, from older exports, the plain document. Message indices
are the schema's own, so nothing needs mapping.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from trajforge.errors import InputError
from trajforge.importers.base import WHOLE_FILE, LineRange, first_line_has_keys, iter_jsonl
from trajforge.schema import FORMAT_VERSION, Trajectory
from trajforge.store.lines import LineError, document_of_line


class TrajforgeJsonlImporter:
    name = "trajforge"
    description = "trajforge JSONL export (one trajectory document per line)"

    def detect(self, path: Path, head: bytes) -> bool:
        return first_line_has_keys(head, "format_version", "task")

    def read(self, path: Path) -> Iterator[Trajectory]:
        return self.read_lines(path, WHOLE_FILE)

    def read_lines(self, path: Path, lines: LineRange) -> Iterator[Trajectory]:
        for number, record in iter_jsonl(path, lines):
            yield _validate(path, number, record)

    def sidecars(self, path: Path) -> list[Path]:
        return []


def _validate(path: Path, number: int, record: object) -> Trajectory:
    where = f"line {number}"
    if not isinstance(record, dict):
        raise InputError(str(path), "expected a JSON object", where)
    version = record.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise InputError(
            str(path), f"format version {version} is newer than {FORMAT_VERSION}", where
        )
    try:
        record = document_of_line(record)
    except LineError as exc:
        raise InputError(str(path), str(exc), where) from None
    try:
        return Trajectory.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InputError(str(path), f"{loc}: {first['msg']}", where) from exc

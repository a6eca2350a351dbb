"""The line shape of trajforge's JSONL export: every line has the same keys and types.

A trajectory document has free-form parts whose shape changes from run to run (metadata,
task data and gold, tool schemas, raw model responses) and typed fields that are null in
some runs and set in others. Readers that infer one schema from the first lines of a file
(Hugging Face `datasets`, pyarrow) fail on such a file. So an export line keeps `id` and
`format_version` as they are and carries every other top-level field of the document as
JSON text: `{"id": "...", "format_version": 1, "task": "{\\"id\\": ...}", "messages":
"[...]", ...}`. `document_of_line` turns a line back into the document, and passes a plain
document (a line of an older export) through unchanged.
"""

from __future__ import annotations

from typing import Any

import orjson

PLAIN_FIELDS = frozenset({"id", "format_version"})
"""Top-level fields written as they are (never null, one type); the rest are JSON text."""


def line_of_document(document: bytes) -> bytes:
    """The export line (without its newline) of a stored trajectory document."""
    parsed = orjson.loads(document)
    return orjson.dumps(
        {
            key: value if key in PLAIN_FIELDS else orjson.dumps(value).decode()
            for key, value in parsed.items()
        }
    )


class LineError(ValueError):
    """A field of an export line that is not valid JSON text."""


def document_of_line(record: dict[str, Any]) -> dict[str, Any]:
    """The trajectory document an export line holds (a plain document is returned as is:
    none of its top-level fields but `id` is a string)."""
    document = {}
    for key, value in record.items():
        if key in PLAIN_FIELDS or not isinstance(value, str):
            document[key] = value
            continue
        try:
            document[key] = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise LineError(f"{key}: not valid JSON text ({exc})") from None
    return document

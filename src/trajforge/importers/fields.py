"""Small conversions the importers of harness logs share: JSON text, ISO times, key sets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson


def json_text(value: Any) -> str:
    """Tool-call arguments as JSON text (a string is kept as the model wrote it)."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def json_value(text: str) -> Any:
    """JSON text parsed, or the text itself when it is not valid JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def unix_time(value: Any) -> float | None:
    """An ISO 8601 time (or a Unix time) as Unix seconds; None when it is neither."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def mapping(value: Any, where: str) -> dict[str, Any]:
    """`value` when it is a JSON object, {} when null; anything else is an error at `where`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def sequence(value: Any, where: str) -> list[Any]:
    """`value` when it is a JSON array, [] when null; anything else is an error at `where`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected an array, got {type(value).__name__}")
    return value


def rest(record: dict[str, Any], *used: str) -> dict[str, Any]:
    """The fields of `record` other than `used` (kept verbatim in `extra` or metadata)."""
    return {k: v for k, v in record.items() if k not in used}


def unknown_keys(record: dict[str, Any], known: frozenset[str]) -> list[str]:
    """The keys of `record` a reader of a format's known versions does not know, sorted."""
    return sorted(k for k in record if k not in known)


def newer_version_warning(format_name: str, version: str, newest: str, skipped: list[str]) -> str:
    """The import warning for a file of a version newer than the importer knows."""
    kept = f"; fields not read (kept verbatim in metadata): {', '.join(skipped)}" if skipped else ""
    return f"{format_name} version {version} is newer than {newest}, read as {newest}{kept}"

"""Reading numbers from a request: every whole number a route takes passes through `whole`,
which bounds its length and value, so no parameter reaches SQLite or `int()` unchecked."""

from __future__ import annotations

from collections.abc import Mapping

from trajforge.errors import UserError

MAX_WHOLE = 2**63 - 1
"""SQLite's largest integer: no parameter may exceed it."""
_SHOWN = 40
"""Characters of a bad value quoted back in the error."""


def whole(
    params: Mapping[str, object],
    key: str,
    default: int | None = None,
    low: int = 0,
    high: int = MAX_WHOLE,
) -> int:
    """The parameter `key` as a whole number from `low` to `high`; `default` when it is
    missing or empty (required when `default` is None). A `UserError` names it otherwise."""
    raw = params.get(key)
    if raw is None or raw == "":
        if default is None:
            raise UserError(f"{key} is required: a whole number from {low} to {high}")
        return default
    text = str(raw)
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(high))
    if not digits or not low <= int(text) <= high:
        shown = text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"
        raise UserError(f"{key} must be a whole number from {low} to {high}, got {shown!r}")
    return int(text)

"""The OpenAI chat wire format: message dicts (as harnesses and servers write them) to
`Message`, and the OpenAI-style error body.

Lowest layer: importers, models and the proxy all speak this format."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from trajforge.errors import first_error
from trajforge.schema import Message

_MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id"}
_ROLES = {"system", "user", "assistant", "tool"}


def message_fields(record: Any) -> dict[str, Any]:
    """The `Message` fields of an OpenAI-style dict; unknown fields (and a nested `extra`)
    go to `extra`.

    Checks what pydantic cannot say clearly (a record that is not a message, the role, tool
    calls without a name); the field types are validated when the trajectory is built, once
    for all its messages. Raises ValueError naming the field at fault.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a message object, got {type(record).__name__}")
    role = record.get("role")
    if role not in _ROLES:
        raise ValueError(f"role must be one of {sorted(_ROLES)}, got {role!r}")
    extra = {k: v for k, v in record.items() if k not in _MESSAGE_FIELDS and k != "extra"}
    if isinstance(record.get("extra"), dict):
        extra |= record["extra"]
    calls = record.get("tool_calls")
    return {
        "role": role,
        "content": record.get("content"),
        "name": record.get("name"),
        "tool_calls": _tool_call_fields(calls) if calls else None,
        "tool_call_id": record.get("tool_call_id"),
        "extra": extra,
    }


def message_list(records: Any, where: str) -> list[dict[str, Any]]:
    """`message_fields` of each record of a list; errors name `where[position]`."""
    if not isinstance(records, list):
        raise ValueError(f"{where}: expected a list of messages")
    fields = []
    for position, record in enumerate(records):
        try:
            fields.append(message_fields(record))
        except ValueError as exc:
            raise ValueError(f"{where}[{position}]: {exc}") from None
    return fields


def to_message(record: Any) -> Message:
    """A validated `Message` from an OpenAI-style dict (see `message_fields`)."""
    try:
        return Message.model_validate(message_fields(record))
    except ValidationError as exc:
        raise ValueError(first_error(exc)) from None


def text_of(fields: dict[str, Any]) -> str:
    """The text of message fields, as `Message.text()` gives it."""
    content = fields.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _tool_call_fields(calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise ValueError("tool_calls: expected a list")
    return [_tool_call_dict(call, position) for position, call in enumerate(calls)]


def _tool_call_dict(call: Any, position: int) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise ValueError(f"tool_calls[{position}]: expected an object")
    function = call.get("function", call)
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise ValueError(f"tool_calls[{position}] has no function name")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {"id": str(call.get("id") or f"call_{position}"), "name": name, "arguments": arguments}


def error_body(message: str, kind: str = "server_error", code: str | None = None) -> dict:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}

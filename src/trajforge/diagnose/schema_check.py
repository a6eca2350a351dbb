"""Checking a tool call against its tool's JSON schema, with `jsonschema`.

The tool must exist and its arguments must be a JSON object valid against the tool's
`parameters`. As in strict function calling, an object schema that lists `properties` and
says nothing of `additionalProperties` allows no other fields. A tool schema that is not
valid JSON Schema cannot judge a call: its calls have no problems.

Problems read `place: what is wrong`; the place is `arguments` for the whole object, else a
path like `flights[0].date`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from trajforge.schema import ToolCall

if TYPE_CHECKING:  # jsonschema is imported on the first check (it costs CLI start-up ~30 ms)
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator


def find_tool(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The function schema of tool `name` among OpenAI-form tool schemas."""
    for tool in tools:
        function = tool.get("function", tool)
        if function.get("name") == name:
            return function
    return None


def call_problems(call: ToolCall, tools: list[dict[str, Any]]) -> list[str]:
    """Why `call` is invalid against `tools` (empty when it is valid)."""
    function = find_tool(tools, call.name)
    if function is None:
        return [f"no tool named {call.name}"]
    try:
        arguments = call.parsed_arguments()
    except ValueError as exc:
        return [f"arguments are not a JSON object: {exc}"]
    parameters = function.get("parameters") or {"type": "object"}
    validator = _validator(orjson.dumps(parameters, option=orjson.OPT_SORT_KEYS))
    if validator is None:
        return []
    from jsonschema.exceptions import UnknownType

    try:
        errors = list(validator.iter_errors(arguments))
    except UnknownType:
        return []
    problems: list[str] = []
    for error in errors:
        problems += [p for p in _described(error) if p not in problems]
    return problems


@lru_cache(maxsize=1024)
def _validator(parameters: bytes) -> Validator | None:
    """A validator of one tool's parameters (None when they are not a valid schema)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    schema = _closed(orjson.loads(parameters))
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    return cls(schema)


def _closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` wherever properties are listed and extra
    fields are not mentioned (recursively)."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if schema.get("properties") and "additionalProperties" not in schema:
        closed["additionalProperties"] = False
    return closed


def _place(error: ValidationError) -> str:
    place = ""
    for part in error.absolute_path:
        place += f"[{part}]" if isinstance(part, int) else f"{'.' if place else ''}{part}"
    return place


def _described(error: ValidationError) -> list[str]:
    """One line per problem: `place: what is wrong`."""
    place = _place(error)
    where = place or "arguments"
    inside = f"{place}." if place else ""
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        return [f"{inside}{name}: required but missing" for name in _missing(error, instance)]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = schema.get("properties") or {}
        return [f"{inside}{name}: unknown field" for name in instance if name not in known]
    if error.validator == "type":
        return [f"{where}: expected {error.validator_value}, got {type(instance).__name__}"]
    if error.validator == "enum":
        return [f"{where}: {instance!r} is not one of {error.validator_value}"]
    return [f"{where}: {error.message}"]


def _missing(error: ValidationError, instance: dict) -> list[str]:
    required = error.validator_value if isinstance(error.validator_value, list) else []
    return [name for name in required if name not in instance]

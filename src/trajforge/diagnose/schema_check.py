"""Checking a tool call against its tool's JSON schema (the subset tool schemas use).

Checks: the tool exists, the arguments are a JSON object, required fields are present, no
unknown fields when `properties` are listed, and each value has the declared type / enum
value, recursively through arrays and objects.
"""

from __future__ import annotations

from typing import Any

from trajforge.schema import ToolCall

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


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
    return value_problems(arguments, function.get("parameters") or {"type": "object"}, "")


def value_problems(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Problems of `value` against `schema` (path names the place for messages)."""
    where = path or "arguments"
    expected = schema.get("type")
    if expected and not _has_type(value, expected):
        return [f"{where}: expected {expected}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    if isinstance(value, dict):
        return _object_problems(value, schema, path)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        problems: list[str] = []
        for position, item in enumerate(value):
            problems += value_problems(item, schema["items"], f"{path}[{position}]")
        return problems
    return []


def _has_type(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else expected
    for name in names:
        types = _TYPES.get(name)
        if types is None:
            return True  # a type this checker does not know: do not reject
        if isinstance(value, bool) and name != "boolean":
            continue
        if isinstance(value, types):
            return True
    return False


def _object_problems(value: dict, schema: dict[str, Any], path: str) -> list[str]:
    properties: dict[str, Any] = schema.get("properties") or {}
    problems = [
        f"{path + '.' if path else ''}{name}: required but missing"
        for name in schema.get("required", [])
        if name not in value
    ]
    for name, item in value.items():
        where = f"{path}.{name}" if path else name
        if name in properties:
            problems += value_problems(item, properties[name], where)
        elif properties and schema.get("additionalProperties") is not True:
            problems.append(f"{where}: unknown field")
    return problems

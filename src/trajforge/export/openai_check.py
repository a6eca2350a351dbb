"""The rules of OpenAI's chat fine-tuning format, checked line by line.

    python -m trajforge.export.openai_check FILE.jsonl

A line is a JSON object with `messages` (and optionally `tools`, `parallel_tool_calls`).
Each message has a known role (system, user, assistant, tool) and only the keys its role
allows; content is a string, or null on an assistant message that makes tool calls; a tool
call is `{id, type: "function", function: {name, arguments}}` with `arguments` a string of
JSON; a tool message answers a call made before it (`tool_call_id`); `weight` is 0 or 1 and
only on assistant messages; at least one assistant message has weight 1 (or none); a tool
schema is `{type: "function", function: {name, ...}}`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError

LINE_KEYS = {"messages", "tools", "parallel_tool_calls"}
MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "weight"},
    "tool": {"role", "content", "tool_call_id"},
}


class OpenAIFormatError(UserError):
    """A line that OpenAI's fine-tuning format does not accept."""


def check_openai_line(line: Any, where: str) -> None:
    """Raise `OpenAIFormatError` (naming `where` and the message) unless `line` is valid."""
    if not isinstance(line, dict):
        raise OpenAIFormatError(f"{where}: not a JSON object")
    unknown = set(line) - LINE_KEYS
    if unknown:
        raise OpenAIFormatError(f"{where}: unknown keys {sorted(unknown)}")
    messages = line.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIFormatError(f"{where}: 'messages' must be a non-empty list")
    _check_tools(line.get("tools", []), where)
    calls: set[str] = set()
    for index, message in enumerate(messages):
        calls |= _check_message(message, calls, f"{where}, message {index}")
    assistant = [m for m in messages if m["role"] == "assistant"]
    if not any(m.get("weight", 1) == 1 for m in assistant):
        raise OpenAIFormatError(f"{where}: no assistant message to learn (weight 1)")


def _check_message(message: Any, calls: set[str], where: str) -> set[str]:
    """Check one message; returns the ids of the tool calls it makes."""
    if not isinstance(message, dict) or message.get("role") not in MESSAGE_KEYS:
        raise OpenAIFormatError(f"{where}: role must be one of {sorted(MESSAGE_KEYS)}")
    role = message["role"]
    unknown = set(message) - MESSAGE_KEYS[role]
    if unknown:
        raise OpenAIFormatError(f"{where}: keys {sorted(unknown)} are not allowed on {role}")
    content = message.get("content")
    pure_call = role == "assistant" and bool(message.get("tool_calls"))
    if not (isinstance(content, str) or (content is None and pure_call)):
        raise OpenAIFormatError(f"{where}: content must be a string")
    if "weight" in message and message["weight"] not in (0, 1):
        raise OpenAIFormatError(f"{where}: weight must be 0 or 1")
    if role == "tool" and message.get("tool_call_id") not in calls:
        raise OpenAIFormatError(f"{where}: tool_call_id answers no earlier tool call")
    made = _calls(message, where)
    return {_check_call(c, f"{where}, tool call {i}") for i, c in enumerate(made)}


def _calls(message: dict[str, Any], where: str) -> list[Any]:
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list) or not calls:
        raise OpenAIFormatError(f"{where}: tool_calls must be a non-empty list")
    return calls


def _check_call(call: Any, where: str) -> str:
    if not isinstance(call, dict) or set(call) != {"id", "type", "function"}:
        raise OpenAIFormatError(f"{where}: expected exactly id, type, function")
    function = call["function"]
    if call["type"] != "function" or not isinstance(function, dict):
        raise OpenAIFormatError(f"{where}: type must be 'function' with a function object")
    if not isinstance(function.get("name"), str) or set(function) != {"name", "arguments"}:
        raise OpenAIFormatError(f"{where}: function must hold exactly name and arguments")
    arguments = function["arguments"]
    if not isinstance(arguments, str):
        raise OpenAIFormatError(f"{where}: arguments must be a string of JSON")
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        raise OpenAIFormatError(f"{where}: arguments are not valid JSON") from None
    if not isinstance(call["id"], str) or not call["id"]:
        raise OpenAIFormatError(f"{where}: id must be a non-empty string")
    return call["id"]


def _check_tools(tools: Any, where: str) -> None:
    if not isinstance(tools, list):
        raise OpenAIFormatError(f"{where}: 'tools' must be a list")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            raise OpenAIFormatError(f"{where}, tool {index}: expected type 'function'")
        if not isinstance(function.get("name"), str):
            raise OpenAIFormatError(f"{where}, tool {index}: function has no name")


def check_openai_file(path: Path) -> int:
    """Check every line of a file; returns the number of lines."""
    count = 0
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise OpenAIFormatError(f"{path}: line {number}: not JSON") from None
        check_openai_line(line, f"{path}: line {number}")
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        for name in args:
            print(f"{name}: {check_openai_file(Path(name))} lines valid")
    except OpenAIFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tool calls written as text, for chat templates that have no tool support (SmolLM2's).

One convention, used by training (rendering a chat before its template), serving (parsing
a generation) and the `llm` policy (parsing a reply that came back as text):

- **Tools** go at the end of the system prompt (a system message is added when there is
  none), one JSON object per line between `<tools>` and `</tools>`:
  `{"name": "go", "description": "...", "parameters": {"target": "A receptacle ..."}}`
  (each parameter with its description), after an instruction that gives the call syntax.
- **A call** is one line `<tool_call>{"name": "go", "arguments": {"target": "sink 1"}}</tool_call>`
  in the assistant's text, after any prose; several calls are several lines.
- **A tool result** is a message with role `tool` whose content is the tool's output.

`parse_reply(text, tools)` reads a generation back: the text outside the tags is the
content, each tag a call. A tag whose body is not a JSON object with a string `name` (a
known tool when `tools` is given) and an object of `arguments`, or a tag left open, is a
parse error: it is listed in `ParsedReply.errors` (the server puts the list in the message's
`tool_call_errors`) and is not a call, so the episode goes on without it instead of failing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
ERRORS_FIELD = "tool_call_errors"
"""The assistant-message field that lists a generation's tool-call parse errors."""

INSTRUCTION = (
    "You can call these tools. To call one, write a line "
    f'{CALL_OPEN}{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}{CALL_CLOSE}'
    " and nothing after it; the result comes back as a tool message."
)
_TAG = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|$)", re.DOTALL)


@dataclass
class ParsedReply:
    """A generation read back: its prose, its tool calls, and what could not be parsed."""

    content: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _function(tool_or_call: dict) -> dict:
    return tool_or_call.get("function", tool_or_call)


def tool_line(tool: dict) -> str:
    function = _function(tool)
    properties = (function.get("parameters") or {}).get("properties") or {}
    params = {name: str(spec.get("description") or spec.get("type", "")) for name, spec in
              properties.items()}  # fmt: skip
    line = {"name": function["name"], "description": function.get("description", "")}
    return orjson.dumps({**line, "parameters": params}).decode()


def tools_block(tools: Sequence[dict]) -> str:
    lines = "\n".join(tool_line(t) for t in tools)
    return f"{INSTRUCTION}\n<tools>\n{lines}\n</tools>"


def call_text(call: dict) -> str:
    """One call in the convention's form (arguments as an object even when stored as JSON)."""
    function = _function(call)
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            arguments = {"raw": arguments}
    body = orjson.dumps({"name": function.get("name", ""), "arguments": arguments}).decode()
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def text_of(content: Any) -> str:
    """A message content's text: a string as it is, text parts joined by spaces."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))


def assistant_text(message: dict) -> str:
    """An assistant message's text with its tool calls written out."""
    parts = [text_of(message.get("content")).strip()]
    parts += [call_text(call) for call in message.get("tool_calls") or []]
    return "\n".join(p for p in parts if p)


def render_messages(messages: Sequence[dict], tools: Sequence[dict]) -> list[dict[str, str]]:
    """Plain `role`/`content` messages for a template without tool support."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role = str(message.get("role", "user"))
        text = assistant_text(message) if role == "assistant" else text_of(message.get("content"))
        plain.append({"role": role, "content": text})
    if tools:
        block = tools_block(tools)
        if plain and plain[0]["role"] == "system":
            plain[0] = {"role": "system", "content": f"{plain[0]['content']}\n\n{block}".strip()}
        else:
            plain.insert(0, {"role": "system", "content": block})
    return plain


def parse_reply(text: str, tools: Sequence[dict] = ()) -> ParsedReply:
    """The prose, calls and parse errors of a generated text (see module docstring)."""
    names = {_function(t).get("name") for t in tools}
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for number, match in enumerate(_TAG.finditer(text), 1):
        closed = match.group(0).endswith(CALL_CLOSE)
        problem = _call_problem(match.group(1), names) if closed else "not closed"
        if problem is None:
            calls.append(_call(match.group(1)))
        else:
            errors.append(f"tool call {number}: {problem}: {match.group(0)[:200]!r}")
    content = _TAG.sub("", text).strip()
    return ParsedReply(content=content or None, calls=calls, errors=errors)


def _call(body: str) -> dict[str, Any]:
    value = orjson.loads(body)
    return {"name": value["name"], "arguments": value.get("arguments") or {}}


def _call_problem(body: str, names: set) -> str | None:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return 'not an object with a string "name"'
    if names and value["name"] not in names:
        return f"unknown tool {value['name']!r}"
    if not isinstance(value.get("arguments", {}), dict):
        return '"arguments" is not an object'
    return None

"""Structured answers from a chat model: the arguments of the one function it was asked to call.

Judges offer a model a single function whose JSON schema is the answer's shape; any
OpenAI-compatible endpoint with tool calling then returns parseable arguments. Models that
answer in text instead are read too: the first `{` to the last `}` of the text (a fenced
block, or JSON inside prose).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from trajforge.schema import Message

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def function_answer(reply: Message, function: str) -> dict[str, Any] | None:
    """The arguments of `reply`'s call to `function`, else a JSON object in its text; None when
    there is neither (or the call's arguments are not valid JSON)."""
    for call in reply.tool_calls or []:
        if call.name == function:
            try:
                return call.parsed_arguments()
            except ValueError:
                return None
    match = _JSON_OBJECT.search(reply.text())
    if not match:
        return None
    try:
        value = orjson.loads(match.group(0))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None

"""The opening of the conversation the capture tests hold: a call whose answer asks for a tool,
then the tool's result."""

from __future__ import annotations

from typing import Any

import openai


def tool_turn(client: openai.OpenAI) -> tuple[Any, list[dict]]:
    """The first completion and the messages after it (system, user, its reply, the result)."""
    messages: list[dict] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
    ]
    first = client.chat.completions.create(model="m", messages=messages)
    reply = first.choices[0].message
    messages.append(reply.model_dump(exclude_none=True, exclude={"refusal", "annotations"}))
    messages.append({"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "a.py"})
    return first, messages

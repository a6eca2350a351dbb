"""One policy for every command that asks a model: retry, then report the failure and go on.

`ask_parsed` calls the model up to `attempts` times until `parse` accepts its reply. A call
that errors (connection, HTTP status) or a reply `parse` rejects counts as one failed attempt.
After the last attempt it returns the reason instead of raising, so a batch records the
failure with its reason beside that item and continues; callers count and report failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trajforge.models.base import ChatModel
from trajforge.schema import Message

T = TypeVar("T")
ATTEMPTS = 3


@dataclass
class Asked(Generic[T]):
    """The parsed answer, or None with the reason the last attempt failed."""

    value: T | None
    failure: str | None = None


def ask_parsed(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    parse: Callable[[Message], T | None],
    attempts: int = ATTEMPTS,
) -> Asked[T]:
    import openai

    reason = "no attempt made"
    for _ in range(max(1, attempts)):
        try:
            reply = model.complete(messages, tools)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            reason = f"model call failed: {exc}"
            continue
        value = parse(reply.message)
        if value is not None:
            return Asked(value)
        shown = reply.message.text() or str(reply.message.tool_calls)
        reason = f"unparseable reply: {shown[:200]!r}"
    return Asked(None, f"{reason} (after {max(1, attempts)} attempts)")

"""Deterministic models for tests and offline runs (public: use them in your own tests).

- `ScriptedModel` answers from a list of replies (text, `Message`, or a function of the
  history), in order.
- `ReplayModel` answers with the assistant messages of a recorded trajectory, in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from trajforge.models.base import ModelReply
from trajforge.schema import LLMCall, Message, Trajectory, Usage

Reply = str | Message | Callable[[list[Message]], Message | str]


class ScriptExhausted(RuntimeError):
    """A scripted model was asked for more replies than it has."""


def _as_message(reply: Message | str) -> Message:
    return reply if isinstance(reply, Message) else Message(role="assistant", content=reply)


def _estimate_tokens(messages: Sequence[Message]) -> int:
    return sum(max(1, len(m.text()) // 4) for m in messages)


class ScriptedModel:
    """Replies from a script, in order; `cycle=True` repeats the script forever."""

    def __init__(self, replies: Sequence[Reply], name: str = "scripted", cycle: bool = False):
        self.name = name
        self._replies = itertools.cycle(replies) if cycle else iter(replies)
        self._counter = itertools.count()

    def complete(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> ModelReply:
        try:
            reply = next(self._replies)
        except StopIteration:
            raise ScriptExhausted(f"{self.name}: script has no more replies") from None
        message = _as_message(reply(messages) if callable(reply) else reply)
        prompt = _estimate_tokens(messages)
        completion = _estimate_tokens([message])
        call = LLMCall(
            id=f"{self.name}-{next(self._counter)}",
            model=self.name,
            usage=Usage(
                prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
            ),
            latency_s=0.0,
        )
        return ModelReply(message=message, call=call)


class ReplayModel(ScriptedModel):
    """Replays the assistant messages of a recorded trajectory (from message `start` on)."""

    def __init__(self, trajectory: Trajectory, start: int = 0):
        replies = [m for m in trajectory.messages[start:] if m.role == "assistant"]
        super().__init__(replies, name=f"replay:{trajectory.id[:12]}")

"""The chat-model protocol shared by policies, judges and user simulators."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from trajforge.schema import LLMCall, Message


class ModelReply(BaseModel):
    """A model's answer: the assistant message and the record of the call that made it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    message: Message
    call: LLMCall


class ChatModel(Protocol):
    """Anything that turns a chat history (and tool schemas) into the next message."""

    name: str

    def complete(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> ModelReply: ...

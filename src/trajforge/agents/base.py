"""Policies (who writes the assistant messages) and user simulators (who writes the user's)."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trajforge.schema import Label, LLMCall, Message, Task


class EpisodeState(BaseModel):
    """What a policy sees when it chooses the next message."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: Task
    messages: list[Message]
    tools: list[dict[str, Any]]
    env: Any = Field(description="The environment (policies that use an oracle read it).")
    step: int = Field(description="Number of assistant messages so far.")


class PolicyStep(BaseModel):
    """A policy's move: the assistant message, and optionally the model call and a label."""

    message: Message
    llm_call: LLMCall | None = None
    label: Label | None = Field(
        default=None, description="Ground truth about this step, e.g. a deliberate error."
    )


class Policy(Protocol):
    name: str

    def act(self, state: EpisodeState) -> PolicyStep: ...


class UserSimulator(Protocol):
    """Plays the user in conversational tasks; a reply containing `USER_STOP` ends the talk."""

    def reply(self, state: EpisodeState) -> Message: ...

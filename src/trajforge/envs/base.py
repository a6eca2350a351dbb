"""The environment protocol: what an agent acts in.

An environment is reset to a task, offers tools (OpenAI JSON schemas), executes tool calls,
judges the final state, and can snapshot and restore its full state. Environments that know
the task's solution also implement `Oracle`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from trajforge.schema import Message, Outcome, Task, ToolCall


class StepResult(BaseModel):
    """The result of one tool call."""

    content: str = Field(description="What the agent sees as the tool's output.")
    error: bool = Field(default=False, description="The call failed (bad arguments, tool error).")
    done: bool = Field(default=False, description="The environment ended the episode.")
    fault: dict[str, str] | None = Field(
        default=None,
        description="Set by a fault injector: {kind, tool, detail}; recorded as a Fault.",
    )


@runtime_checkable
class Environment(Protocol):
    """A task environment; see module docstring."""

    name: str

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas in OpenAI form (`{"type": "function", "function": {...}}`)."""
        ...

    def reset(self, task: Task) -> list[Message]:
        """Start `task`; returns the opening messages (system prompt, first observation)."""
        ...

    def step(self, call: ToolCall) -> StepResult:
        """Execute one tool call."""
        ...

    def evaluate(self) -> Outcome:
        """Judge the current state (success, reward, judged_by)."""
        ...

    def snapshot(self) -> Any:
        """An opaque copy of the full state."""
        ...

    def restore(self, state: Any) -> None:
        """Return to a state returned by `snapshot()`."""
        ...


@runtime_checkable
class Oracle(Protocol):
    """Optional: an environment that knows the way to success."""

    def distance(self) -> int | None:
        """Fewest actions to success from here; None when success is no longer reachable."""
        ...

    def expert_action(self) -> ToolCall | Message | None:
        """The next action of an expert (a tool call, or a message to the user)."""
        ...


@runtime_checkable
class ConversationBinding(Protocol):
    """Optional: an environment whose state reads the conversation as it grows (tau's
    user-visible confirmations); bound once per episode to its live message list."""

    def bind_conversation(self, messages: list[Message]) -> None: ...


@runtime_checkable
class TaskSet(Protocol):
    """Optional: an environment family that can list or generate its tasks."""

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]: ...

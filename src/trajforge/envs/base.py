"""The environment protocol: what an agent acts in.

Every environment is reset to a task, offers tools (OpenAI JSON schemas), executes tool
calls, judges the final state, snapshots and restores its full state, can be bound to the
live conversation (a no-op unless the judge reads it) and is closed after use.
`EnvironmentBase` gives the two no-op defaults.

Opt-in abilities are small protocols, checked with `isinstance`:

- `Oracle`: knows the way to success (distance, the expert's next action);
- `TaskSet` / `TaskLookup`: lists its tasks / finds one by id;
- `StateHashing`: a hash of its state and the records that changed;
- `EndsEpisodes`: can end the episode itself (`done`);
- `UserFacts`: what the task's user can tell about themselves;
- `RequiredOutputs`: what the agent must state for the task to succeed, and whether it has;
- `ComparesSubmission`: compares its final state with a recorded submission;
- `ServesTasks`: says which tasks it has no data for;
- `TextActions`: actions written in the assistant's text (mini-swe-agent's bash blocks).

A conversational task's user stops talking with `USER_STOP` in a message.
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

    def bind_conversation(self, messages: list[Message]) -> None:
        """Judge from this live message list (environments whose outcome depends on what was
        said); a no-op for the others."""
        ...

    def close(self) -> None:
        """Release what the environment holds (processes, directories)."""
        ...


class EnvironmentBase:
    """Defaults for the parts of `Environment` most environments do not need."""

    def bind_conversation(self, messages: list[Message]) -> None:
        """Nothing to bind: the outcome does not depend on the conversation."""

    def close(self) -> None:
        """Nothing to release."""


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
class TaskSet(Protocol):
    """Optional: an environment family that can list or generate its tasks."""

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]: ...


@runtime_checkable
class TaskLookup(Protocol):
    """Optional: finds one of its tasks by id without listing them all."""

    def task_by_id(self, task_id: str) -> Task: ...


@runtime_checkable
class StateHashing(Protocol):
    """Optional: a hash of the state (equal states, equal hashes) and what changed."""

    def state_hash(self) -> str: ...

    def changed_records(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class EndsEpisodes(Protocol):
    """Optional: the environment can end the episode itself (a hand-over, a final tool)."""

    done: bool


@runtime_checkable
class UserFacts(Protocol):
    """Optional: what the task's user can tell about themselves (a scripted user's lines)."""

    def user_facts(self) -> dict[str, str]: ...


@runtime_checkable
class RequiredOutputs(Protocol):
    """Optional: answers the agent must state to the user (judged in the bound conversation)."""

    def required_outputs(self) -> list[str]: ...

    def outputs_given(self) -> dict[str, bool]: ...


@runtime_checkable
class ConfiguredByRecording(Protocol):
    """Optional, on the class: the configuration that replays a recorded run faithfully
    (e.g. the data revision its tool outputs show)."""

    @classmethod
    def config_for_recording(cls, messages: list[Message]) -> Any: ...


@runtime_checkable
class TextActions(Protocol):
    """Optional: actions written in the assistant's text (one ```bash block, as mini-swe-agent
    writes them), each answered by a user message; the episode loop, replay and fork read
    them so."""

    def text_action(self, message: Message) -> ToolCall | None:
        """The action of an assistant message, or None when it holds none."""
        ...

    def observation(self, result: StepResult) -> Message:
        """The message that answers an action with `result`."""
        ...

    def comparable(self, output: str) -> str:
        """An output with what differs between machines (times, paths) normalized, for
        comparing a replayed output with the recorded one."""
        ...


@runtime_checkable
class ComparesSubmission(Protocol):
    """Optional: compares its final state with a recorded submission (a SWE run's diff)."""

    def submission_matches(self, submission: str | None) -> bool | None:
        """Whether the state equals `submission`; None when there is none to compare."""
        ...


@runtime_checkable
class ServesTasks(Protocol):
    """Optional: says which tasks it cannot run (a benchmark instance it holds no data for)."""

    def cannot_serve(self, task: Task) -> str | None:
        """Why `task` cannot run here, or None when it can."""
        ...


USER_STOP = "###STOP###"
"""A user message containing this ends the conversation."""

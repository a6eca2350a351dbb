"""The teacher under guidance: guidance in its system prompt, never in the record.

`GuidedPolicy` shows the wrapped policy the conversation with the guidance added to the
system message (a system message is inserted when the run has none); the messages it
returns are recorded as they are, so the trajectory never holds the guidance. `strip`
still removes any copy of the guidance text from the messages and drops the model-call
records made under guidance (their prompt token ids encode it), and writes the provenance.

`InterveningPolicy` is the intervene-and-replay baseline: it sends the correction as its
first message, then lets the teacher continue unguided.
"""

from __future__ import annotations

from typing import Any

from trajforge.agents.base import EpisodeState, Policy, PolicyStep
from trajforge.generate.guided.guidance import Guidance
from trajforge.schema import Message, Trajectory

GUIDANCE_HEADER = "## Guidance for this task"


def with_guidance(
    messages: list[Message], guidance: Guidance | None, system: str | None = None
) -> list[Message]:
    """The messages as the guided teacher sees them. `system` is the environment's system
    prompt, given to a teacher continuing a run that was recorded without one (tau2's
    simulations, say); the guidance goes at its end."""
    block = f"{GUIDANCE_HEADER}\n{guidance.text}" if guidance is not None else ""
    if messages and messages[0].role == "system":
        first = messages[0]
        text = f"{first.text()}\n\n{block}" if block else first.text()
        return [first.model_copy(update={"content": text}), *messages[1:]]
    text = "\n\n".join(part for part in (system, block) if part)
    return [Message(role="system", content=text), *messages] if text else list(messages)


class GuidedPolicy:
    """A policy that reads `guidance` (and, for a run recorded without one, the
    environment's `system` prompt) in its system prompt."""

    def __init__(
        self, teacher: Policy, guidance: Guidance | None, system: str | None = None
    ) -> None:
        self.teacher = teacher
        self.guidance = guidance
        self.system = system
        self.name = teacher.name

    def act(self, state: EpisodeState) -> PolicyStep:
        view = with_guidance(state.messages, self.guidance, self.system)
        return self.teacher.act(state.model_copy(update={"messages": view}))


class InterveningPolicy:
    """Sends `first` (the correction), then defers to the teacher."""

    def __init__(self, teacher: Policy, first: Message) -> None:
        self.teacher = teacher
        self.first: Message | None = first
        self.name = teacher.name

    def act(self, state: EpisodeState) -> PolicyStep:
        if self.first is not None:
            message, self.first = self.first, None
            return PolicyStep(message=message)
        return self.teacher.act(state)


def strip(demo: Trajectory, guidance: Guidance, at: int, provenance: dict[str, Any]) -> Trajectory:
    """The demonstration without any trace of the guidance, with its provenance."""
    messages = [_without(m, guidance.text) for m in demo.messages]
    kept_calls = [c for c in demo.llm_calls if (c.message_index or 0) < at]
    metadata = dict(demo.metadata) | {"recovery": provenance}
    return demo.model_copy(
        update={"messages": messages, "llm_calls": kept_calls, "metadata": metadata, "id": ""}
    )


def _without(message: Message, text: str) -> Message:
    content = message.content
    if isinstance(content, str) and text and text in content:
        cleaned = content.replace(f"{GUIDANCE_HEADER}\n{text}", "").replace(text, "").rstrip()
        return message.model_copy(update={"content": cleaned})
    return message

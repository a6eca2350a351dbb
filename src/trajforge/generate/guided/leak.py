"""The leak check: does the guidance show through a demonstration?

A demonstration leaks when the teacher's own messages (those after the fork index) share
a word n-gram with the guidance that the context did not already contain (the task, the
system prompt, the user's and the tools' messages), or when they refer to hints, advice or
"the guidance" at all. A leaking demonstration is rejected: a student trained on it would
learn to quote help it will not have.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from trajforge.generate.guided.guidance import Guidance
from trajforge.schema import Message, Trajectory

REFERENCES = re.compile(
    r"\b(hints?|hinted|guidance|the advice|advised|i was told|i've been told|as instructed|"
    r"privileged|a review of an earlier attempt|the plan (?:says|given))\b",
    re.IGNORECASE,
)


class LeakConfig(BaseModel):
    """How strict the leak check is."""

    ngram: int = Field(default=5, ge=2, description="Word n-gram length compared.")
    max_shared: int = Field(
        default=0, ge=0, description="Shared n-grams allowed (not counting context ones)."
    )


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = words(text)
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def teacher_text(message: Message) -> str:
    """What the teacher wrote in a message: its text and its tool calls' arguments."""
    calls = " ".join(f"{c.name} {c.arguments}" for c in message.tool_calls or [])
    return f"{message.text()} {calls}".strip()


def find_leaks(
    demo: Trajectory, guidance: Guidance, at: int, config: LeakConfig | None = None
) -> list[str]:
    """Reasons the demonstration leaks the guidance (empty: clean)."""
    config = config or LeakConfig()
    own = [m for m in demo.messages[at:] if m.role == "assistant"]
    context = " ".join(
        [demo.task.instruction or ""]
        + [m.text() for m in demo.messages if m.role != "assistant"]
        + [m.text() for m in demo.messages[:at] if m.role == "assistant"]
    )
    reasons = []
    for message in own:
        match = REFERENCES.search(teacher_text(message))
        if match:
            reasons.append(f"refers to '{match.group(0)}': {message.text()[:80]!r}")
    prose = " ".join(m.text() for m in own)
    shared = (ngrams(guidance.text, config.ngram) & ngrams(prose, config.ngram)) - ngrams(
        context, config.ngram
    )
    if len(shared) > config.max_shared:
        sample = " ".join(sorted(shared)[0])
        reasons.append(f"{len(shared)} word {config.ngram}-grams of the guidance, e.g. '{sample}'")
    return reasons

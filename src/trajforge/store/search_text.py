"""What the full-text index (`run_search`) holds for a run, computed from the trajectory.

The store writes these values itself, in the transaction that writes the run, from the
`Trajectory` it already has; SQL triggers used to extract them from the stored JSON, which
parsed each document again several times (a 17 MB run took 37 times its size in memory).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from trajforge.schema import Message, Trajectory


class RunSearchText(NamedTuple):
    """One `run_search` row: the searched text and two unindexed summaries."""

    body: str
    """Task, messages (text, speaker, tool calls with arguments), labels, faults, failed
    model calls and how the run ended, one part per line."""
    labels: str | None
    """`source:message_index` per label (`run` for a run-level label), space-separated."""
    faults: str | None
    """`kind:message_index` per fault, space-separated."""


def run_search_text(traj: Trajectory) -> RunSearchText:
    ended = traj.outcome.exit_status or traj.outcome.termination_reason  # the recorded word
    parts = [traj.task.id, traj.task.instruction, ended]
    parts += _message_parts(traj.messages)
    parts += [_joined(x.category, x.agent, x.reason) for x in traj.labels]
    parts += [_joined(f.recorded_kind, f.tool, f.detail) for f in traj.faults]
    parts += [call.error for call in traj.llm_calls]
    labels = [f"{x.source}:{_index_or_run(x.message_index)}" for x in traj.labels]
    faults = [f"{f.recorded_kind}:{f.message_index}" for f in traj.faults]
    return RunSearchText(
        "\n".join(part for part in parts if part),
        " ".join(labels) or None,
        " ".join(faults) or None,
    )


def _message_parts(messages: list[Message]) -> Iterator[str | None]:
    for message in messages:
        if isinstance(message.content, str):
            yield message.content
        elif message.content:
            yield from _texts(message.content)
    for message in messages:
        yield message.name
    for message in messages:
        for call in message.tool_calls or ():
            yield f"{call.name} {call.arguments}"


def _texts(value: Any) -> Iterator[str]:
    """Every string under a `text` key in content parts, at any depth."""
    if isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "text" and isinstance(item, str):
                yield item
            else:
                yield from _texts(item)


def _index_or_run(message_index: int | None) -> str:
    return "run" if message_index is None else str(message_index)


def _joined(*values: str | None) -> str:
    return " ".join(value or "" for value in values)

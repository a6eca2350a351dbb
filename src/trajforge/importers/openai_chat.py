"""OpenAI chat JSONL: one `{"messages": [...], "tools": [...]}` conversation per line.

This is the format SFT trainers read. A conversational prompt-completion line (`prompt` and
`completion` message lists, as trajforge's training rows hold them when only the completion
is learned) is read as the conversation `prompt + completion`. `tools` may be a JSON string
of the list (older trajforge views wrote it so).
Other keys of a line are kept in `metadata`; `task_id` / `id`, `environment`, `model`,
`success` / `reward` are used when present. Without a task id, the id is derived from the
opening system and user messages, so conversations on the same prompt share a task.

Step mapping: message index = position in the line's `messages`; nothing else to map.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import InputError
from trajforge.importers.base import (
    WHOLE_FILE,
    LineRange,
    first_line_has_keys,
    iter_jsonl,
    record_problem,
)
from trajforge.openai_wire import to_message
from trajforge.schema import Message, Outcome, Source, Task, Trajectory

_USED = {
    "messages",
    "prompt",
    "completion",
    "tools",
    "task_id",
    "id",
    "environment",
    "model",
    "success",
    "reward",
}


class OpenAIChatImporter:
    name = "openai-chat"
    description = 'OpenAI chat JSONL ({"messages": [...], "tools": [...]} per line)'

    def detect(self, path: Path, head: bytes) -> bool:
        if first_line_has_keys(head, "format_version"):
            return False
        return first_line_has_keys(head, "messages") or first_line_has_keys(
            head, "prompt", "completion"
        )

    def read(self, path: Path) -> Iterator[Trajectory]:
        return self.read_lines(path, WHOLE_FILE)

    def read_lines(self, path: Path, lines: LineRange) -> Iterator[Trajectory]:
        for number, record in iter_jsonl(path, lines):
            try:
                yield _to_trajectory(record, path)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(str(path), record_problem(exc), f"line {number}") from exc

    def sidecars(self, path: Path) -> list[Path]:
        return []


def _to_trajectory(record: Any, path: Path) -> Trajectory:
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    conversation = record["messages"] if "messages" in record else _prompt_completion(record)
    messages = _messages(conversation)
    tools = _tools(record.get("tools"))
    reward = record.get("reward")
    success = record.get("success")
    if success is None and isinstance(reward, int | float):
        success = reward >= 1.0 - 1e-9
    return Trajectory(
        task=Task(
            id=str(record.get("task_id") or record.get("id") or _prompt_id(messages)),
            environment=record.get("environment"),
            instruction=next((m.text() for m in messages if m.role == "user"), None),
        ),
        source=Source(
            harness="openai-chat", model=record.get("model"), file=str(path), format="openai-chat"
        ),
        messages=messages,
        tools=tools,
        outcome=Outcome(success=success, reward=reward),
        metadata={k: v for k, v in record.items() if k not in _USED},
    )


def _prompt_completion(record: dict[str, Any]) -> list[Any]:
    prompt, completion = record["prompt"], record["completion"]
    if not isinstance(prompt, list) or not isinstance(completion, list):
        raise ValueError("prompt and completion: expected lists of messages")
    return prompt + completion


def _tools(raw: Any) -> list[Any]:
    """The tool schemas: a list, or a JSON string of one (as training views write them, so
    that every row has the same column type)."""
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ValueError("tools: a string that is not a JSON list") from None
    tools = raw or []
    if not isinstance(tools, list):
        raise ValueError(f"tools: expected a list, got {type(tools).__name__}")
    return tools


def _messages(raw_messages: Any) -> list[Message]:
    if not isinstance(raw_messages, list):
        raise ValueError("messages: expected a list")
    messages = []
    for position, raw in enumerate(raw_messages):
        try:
            messages.append(to_message(raw))
        except (ValueError, AttributeError) as exc:
            raise ValueError(f"messages[{position}]: {exc}") from exc
    return messages


def _prompt_id(messages: list[Message]) -> str:
    opening = [m.text() for m in messages if m.role in ("system", "user")][:2]
    digest = hashlib.sha256("\x00".join(opening).encode()).hexdigest()
    return f"chat-{digest[:12]}"

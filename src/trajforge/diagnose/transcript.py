"""A run's messages as numbered plain text, for judges and training views."""

from __future__ import annotations

from trajforge.schema import Message


def transcript(messages: list[Message], max_chars: int) -> str:
    """Numbered plain-text transcript: `[i] role (name): text` and `-> tool(args)` lines."""
    lines = []
    for index, message in enumerate(messages):
        who = message.role + (f" ({message.name})" if message.name else "")
        text = message.text()
        if len(text) > max_chars:
            text = text[: max_chars // 2] + " [...] " + text[-max_chars // 2 :]
        lines.append(f"[{index}] {who}: {text}")
        lines.extend(f"    -> {c.name}({c.arguments})" for c in message.tool_calls or [])
    return "\n".join(lines)

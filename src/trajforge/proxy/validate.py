"""Requests checked before they are forwarded: a malformed one gets a clear 400, unrecorded.

Only the shape the proxy relies on to record a call is checked (what an OpenAI-compatible
server would refuse anyway): a chat request needs `messages`, a list of message objects
with a string `role`; a text completion needs `prompt` as text, a list of texts or
a list of token ids. Everything else goes to the upstream untouched, which judges it.
"""

from __future__ import annotations

from typing import Any

from trajforge.proxy.record import Endpoint

SHORT = 60


def request_problem(endpoint: Endpoint, body: dict[str, Any], checked: int = 0) -> str | None:
    """Why `body` cannot be forwarded and recorded, or None when it can; the first `checked`
    messages are known to be fine (they were a previous request's)."""
    if endpoint == "chat/completions":
        return _messages_problem(body.get("messages"), checked)
    return _prompt_problem(body.get("prompt"))


def _messages_problem(messages: Any, checked: int) -> str | None:
    if not isinstance(messages, list):
        return f"'messages' must be a list of messages, got {_short(messages)}"
    for position in range(checked, len(messages)):
        message = messages[position]
        if not isinstance(message, dict):
            return f"messages[{position}] must be an object, got {_short(message)}"
        if not isinstance(message.get("role"), str):
            return f"messages[{position}].role must be a string, got {_short(message.get('role'))}"
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            return f"messages[{position}].tool_calls must be a list, got {_short(calls)}"
    return None


def _prompt_problem(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return None
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return None
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return None
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return None
    return f"'prompt' must be text, a list of texts or of token ids, got {_short(prompt)}"


def _short(value: Any) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."

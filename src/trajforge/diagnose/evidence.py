"""Reading a recorded run for evidence: tool results, errors, writes, repeated calls.

These helpers look only at the messages (no environment), so they work on any imported log.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from trajforge.schema import Message, ToolCall, Trajectory

READ_PREFIXES = ("get_", "find_", "list_", "search_", "lookup_", "read_", "check_")
READ_TOOLS = {"calculate", "think"}
_ERROR_TEXT = re.compile(
    r"^\s*(error\b|exception\b|traceback\b|unknown (tool|action)\b|invalid\b)|"
    r"exitcode: [1-9]|execution failed|Traceback \(most recent call last\)",
    re.IGNORECASE,
)


def is_write(name: str) -> bool:
    """Whether a tool changes state (by name: readers start with get_/find_/list_/search_)."""
    return not (name.startswith(READ_PREFIXES) or name in READ_TOOLS)


def is_error_text(text: str) -> bool:
    """Whether a tool or terminal output reports a failure."""
    return bool(_ERROR_TEXT.search(text[:400]))


def canonical_arguments(arguments: str | dict[str, Any]) -> str:
    """Arguments as sorted-key JSON (invalid JSON is kept as its raw text)."""
    parsed: Any = arguments
    if isinstance(arguments, str):
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS).decode()


def calls_with_results(traj: Trajectory) -> list[tuple[int, ToolCall, int | None]]:
    """Every tool call as (assistant message index, call, index of its result or None).

    A result answers the earliest unanswered call with its id (some models reuse ids).
    """
    found: list[list] = []
    pending: dict[str, list[int]] = {}
    for index, message in enumerate(traj.messages):
        for call in message.tool_calls or []:
            pending.setdefault(call.id, []).append(len(found))
            found.append([index, call, None])
        waiting = pending.get(message.tool_call_id or "") if message.role == "tool" else None
        if waiting:
            found[waiting.pop(0)][2] = index
    return [(index, call, result) for index, call, result in found]


def speaker(message: Message) -> str:
    """Who wrote a message: its name when set (multi-agent logs), else its role."""
    return message.name or message.role


def is_multi_agent(traj: Trajectory) -> bool:
    """A log whose agent messages carry speaker names (Who&When, AutoGen...)."""
    return any(m.name for m in traj.messages if m.role in ("user", "assistant"))


def excerpt(text: str, limit: int = 160) -> str:
    """A one-line excerpt of a message for citations."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def gold_actions(traj: Trajectory) -> list[dict[str, Any]] | None:
    """The task's gold actions as `[{name, kwargs}]` when the source recorded them (tau-bench
    writes `kwargs`, tau2-bench `arguments`)."""
    gold = traj.task.gold
    if not isinstance(gold, dict) or not isinstance(gold.get("actions"), list):
        return None
    return [
        {"name": a["name"], "kwargs": a.get("kwargs") or a.get("arguments") or {}}
        for a in gold["actions"]
        if isinstance(a, dict) and "name" in a
    ]

"""Action extractor for OpenAI tool-call harnesses (tau-bench style).

Each tool call is one action: `read` for lookups (`get_*`, `find_*`, `search_*`, `list_*`,
`calculate`), `think` for a scratchpad tool, `escalate` for a hand-off to a human, and `edit`
for anything else (a call that changes state). The records it touches are the string and
number values of its arguments. A tool output starting with "Error" (or an unparsable
argument list) is an error. An assistant message without tool calls is a reply to the user.
"""

from __future__ import annotations

import orjson

from trajforge.monitor.actions import Action
from trajforge.schema import Message, ToolCall

READ_PREFIXES = ("get_", "find_", "search_", "list_", "lookup_", "read_", "calculate", "check_")
ESCALATE_MARKERS = ("transfer", "escalate", "human")


def parse_tool_actions(message: Message, replies: list[Message]) -> tuple[list[Action], bool]:
    """(actions, error) of an assistant message with tool calls and the messages answering it."""
    actions = [_action(call) for call in message.tool_calls or []]
    outputs = [m.text() for m in replies if m.role == "tool"]
    broken = any(a.kind == "bad_arguments" for a in actions)
    return actions, broken or any(is_error_output(text) for text in outputs)


def respond_action(message: Message) -> Action:
    """The action of an assistant message that talks to the user."""
    return Action(kind="respond", name="respond", text=" ".join(message.text().split()))


def is_error_output(text: str) -> bool:
    head = text.lstrip()[:40].lower()
    return head.startswith(("error", "exception", "traceback")) or "not found" in head


def _action(call: ToolCall) -> Action:
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return Action(kind="bad_arguments", name=call.name, text=f"{call.name} {call.arguments}")
    text = f"{call.name} " + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    return Action(
        kind=_kind(call.name),
        name=call.name,
        text=text,
        paths=_records(arguments),
        lines_written=1 if _kind(call.name) == "edit" else 0,
    )


def _kind(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith(READ_PREFIXES):
        return "read"
    if lowered == "think":
        return "think"
    if any(marker in lowered for marker in ESCALATE_MARKERS):
        return "escalate"
    return "edit"


def _records(arguments: dict) -> tuple[str, ...]:
    values = []
    for value in arguments.values():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            values.append(str(value))
        elif isinstance(value, list):
            values.extend(str(v) for v in value if isinstance(v, str | int))
    return tuple(dict.fromkeys(values))

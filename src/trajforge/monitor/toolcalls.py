"""Action extractor for OpenAI tool-call harnesses (tau-bench, and coding agents with tools).

Each tool call is one action: `read` for lookups (`get_*`, `find_*`, `search_*`, `list_*`,
`calculate`), `think` for a scratchpad tool, `escalate` for a hand-off to a human, and `edit`
for anything else (a call that changes state). The records it touches are the string and
number values of its arguments. A tool output starting with "Error" (or an unparsable
argument list) is an error. An assistant message without tool calls is a reply to the user.

Coding tools are read for what they do to the repository, like bash-in-text actions:
- a shell tool (`bash`, `execute_bash`, `shell`, ...) with a `command` is split and classified
  by the bash extractor; its output is an error also when it reports a nonzero return or exit
  code or a Python traceback;
- a file-editor tool (`str_replace_editor` style, with `command` view / create / str_replace /
  insert / undo_edit and a `path`) is a read (with its view range), a write, an edit (counting
  the lines it writes) or a revert of that path.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from trajforge.monitor.actions import Action
from trajforge.monitor.bash import (
    classify,
    clean_path,
    is_test_path,
    returncode,
    split_commands,
)
from trajforge.schema import Message, ToolCall

READ_PREFIXES = ("get_", "find_", "search_", "list_", "lookup_", "read_", "calculate", "check_")
ESCALATE_MARKERS = ("transfer", "escalate", "human")
SHELL_TOOLS = {"bash", "execute_bash", "shell", "run_shell_command", "terminal", "run_command"}
SHELL_ARGUMENTS = ("command", "cmd", "script")
EDITOR_KINDS = {
    "view": "read",
    "create": "write",
    "str_replace": "edit",
    "insert": "edit",
    "undo_edit": "revert",
}
EDITOR_TEXT = ("new_str", "file_text", "insert_text", "new_text")
_EXIT_CODE = re.compile(r"exit code[:= ]+(-?\d+)", re.I)


def parse_tool_actions(message: Message, replies: list[Message]) -> tuple[list[Action], bool]:
    """(actions, error) of an assistant message with tool calls and the messages answering it."""
    actions = [action for call in message.tool_calls or [] for action in _actions(call)]
    outputs = [m.text() for m in replies if m.role == "tool"]
    broken = any(a.kind == "bad_arguments" for a in actions)
    shell = any(_shell_command(call) is not None for call in message.tool_calls or [])
    failed = any(is_error_output(text) or (shell and shell_failed(text)) for text in outputs)
    return actions, broken or failed


def respond_action(message: Message) -> Action:
    """The action of an assistant message that talks to the user."""
    return Action(kind="respond", name="respond", text=" ".join(message.text().split()))


def is_error_output(text: str) -> bool:
    head = text.lstrip()[:40].lower()
    return head.startswith(("error", "exception", "traceback")) or "not found" in head


def shell_failed(output: str) -> bool:
    """A shell tool's output reports a nonzero return / exit code or a Python traceback."""
    code = returncode(output)
    if code is None and (match := _EXIT_CODE.search(output)):
        code = int(match.group(1))
    return bool(code) or "Traceback (most recent call last)" in output


def _actions(call: ToolCall) -> list[Action]:
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return [Action(kind="bad_arguments", name=call.name, text=f"{call.name} {call.arguments}")]
    command = _shell_command(call, arguments)
    if command is not None:
        actions = [classify(cmd, body) for cmd, body in split_commands(command)]
        return [a for a in actions if a.kind != "empty"]
    if str(arguments.get("command")) in EDITOR_KINDS and isinstance(arguments.get("path"), str):
        return [_editor_action(call.name, arguments)]
    return [_action(call, arguments)]


def _shell_command(call: ToolCall, arguments: dict[str, Any] | None = None) -> str | None:
    if call.name.lower() not in SHELL_TOOLS:
        return None
    if arguments is None:
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            return None
    values = (arguments.get(key) for key in SHELL_ARGUMENTS)
    return next((v for v in values if isinstance(v, str)), None)


def _editor_action(name: str, arguments: dict[str, Any]) -> Action:
    path, command = clean_path(arguments["path"]), arguments["command"]
    written = next((arguments[k] for k in EDITOR_TEXT if isinstance(arguments.get(k), str)), "")
    span = arguments.get("view_range")
    region = None
    if isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span):
        region = (path, span[0], span[1])
    return Action(
        kind=EDITOR_KINDS[command],
        name=name,
        text=f"{name} {command} {path}",
        paths=(path,),
        region=region,
        lines_written=len(written.splitlines()),
        on_test_file=command != "view" and is_test_path(path),
    )


def _action(call: ToolCall, arguments: dict[str, Any]) -> Action:
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

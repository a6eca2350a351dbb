"""Training rows in, the sequences the codecs train on out, each checked once.

`read_rows(path)` reads a JSONL file (`.gz` too) of training rows (`trajforge.generate.rows`:
the `messages`, `prompt-completion` and `preference` forms), each line validated; an error
names the file, the line and the field (`prompt[1].content: must be a string, not a
number`). `run_rows(runs)` makes the rows of stored runs (a labelled mistake is never
learned), naming a run that cannot be one.

`sequences(rows)` turns rows into the (messages, tools) pairs `train_sft` trains on: an
assistant turn that is not learned carries `weight: 0` (what the codecs mask), by the rule
of each form: in a `messages` row every assistant turn is learned; in a prompt-completion
row only the completion is. The rows of one run cut into one row per learned turn are packed
back into one sequence (`pack_rows`): the same tokens carry loss, computed in one pass.
Preference rows are refused (they are for preference training): `preference_pairs(rows)`
turns each into its two sequences, prompt + chosen and prompt + rejected, with only the
answer learned (what `trajforge.train.dpo` trains on); `read_rows(path, form="preference")`
refuses a line of another form.

`chat_row(value)` checks such a sequence against `ChatRow` (an OpenAI chat record: `messages`
with `"weight": 0` on a turn that is not learned, and `tools`) and returns it with `tools` as
a list; `train_sft` checks every sequence with it before anything is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from trajforge.errors import InputError, UserError
from trajforge.generate.recovery import household_rows
from trajforge.generate.rows import pack_rows, validate_row
from trajforge.jsonfile import iter_jsonl
from trajforge.schema import Role, Trajectory

Chat = tuple[list[dict], list[dict]]
"""(messages, tools): one sequence the codecs encode."""

_JSON_TYPES = {"int": "a number", "float": "a number", "str": "a string", "bool": "a boolean",
               "NoneType": "null", "list": "a list", "dict": "an object"}  # fmt: skip


def json_type(value: object) -> str:
    """`a number`, `a list`, `null`... : what a JSON value is, for error messages."""
    return _JSON_TYPES.get(type(value).__name__, type(value).__name__)


def _content(value: object) -> object:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in value
    ):
        return value
    raise ValueError(f"must be text, a list of text parts or null, not {json_type(value)}")


def _arguments(value: object) -> object:
    if value is None or isinstance(value, dict | str):
        return value
    raise ValueError(f"must be an object or a JSON string of one, not {json_type(value)}")


def _function_form(value: object) -> object:
    """A tool or tool call given as the bare function (`{"name": ...}`), as its OpenAI form."""
    if isinstance(value, dict) and "function" not in value and "name" in value:
        return {"type": "function", "function": value}
    return value


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    """A tool call's function: its name and arguments."""

    name: str = Field(description="The tool called.")
    arguments: Annotated[dict[str, Any] | str | None, BeforeValidator(_arguments)] = Field(
        default=None, description="An object, or a JSON string of one (none: no arguments)."
    )


class ToolCall(_Open):
    """A call an assistant turn makes (the bare function form is accepted too)."""

    function: FunctionCall = Field(description="What is called, with which arguments.")


class ChatMessage(_Open):
    """One message of a training row."""

    role: Role = Field(description="system, user, assistant or tool.")
    content: Annotated[str | list[dict[str, Any]] | None, BeforeValidator(_content)] = Field(
        default=None, description="Text, a list of parts with `text`, or null."
    )
    name: str | None = Field(default=None, description="The speaker or tool name.")
    tool_calls: list[Annotated[ToolCall, BeforeValidator(_function_form)]] | None = Field(
        default=None, description="An assistant turn's calls."
    )
    tool_call_id: str | None = Field(default=None, description="The call a tool turn answers.")
    weight: Literal[0, 1] | None = Field(
        default=None, description="0: kept as context, not learned (the OpenAI field)."
    )


class ToolParameters(_Open):
    """A tool's JSON schema, as far as the codecs read it."""

    properties: dict[str, Any] | None = Field(default=None, description="Argument schemas.")


class ToolFunction(_Open):
    """The function a tool offers."""

    name: str = Field(description="The tool's name.")
    parameters: ToolParameters | None = Field(default=None, description="JSON schema.")


class ToolSpec(_Open):
    """A tool offered to the agent (the bare function form is accepted too)."""

    function: ToolFunction = Field(description="The tool offered.")


class ChatRow(_Open):
    """One training row (see the module docstring)."""

    messages: list[ChatMessage] = Field(description="The conversation.")
    tools: list[Annotated[ToolSpec, BeforeValidator(_function_form)]] = Field(
        default_factory=list, description="Tools offered (OpenAI form)."
    )


def chat_row(value: object) -> dict[str, Any]:
    """`value` checked against `ChatRow`, with `tools` parsed to a list; the row's own dicts
    are returned (what the codecs read is exactly what was given). Raises `ValueError` with
    the field and the problem."""
    if not isinstance(value, dict):
        raise ValueError(f"a row must be an object, not {json_type(value)}")
    row = {**value, "tools": _tool_list(value.get("tools"))}
    try:
        ChatRow.model_validate(row)
    except ValidationError as exc:
        raise ValueError(describe(exc)) from None
    return row


def _tool_list(tools: object) -> object:
    if tools is None:
        return []
    if isinstance(tools, str):
        try:
            return orjson.loads(tools)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"tools: a string that is not JSON ({exc})") from None
    return tools


_WANTED = {"model_type": "an object", "dict_type": "an object", "list_type": "a list",
           "string_type": "a string", "model_attributes_type": "an object"}  # fmt: skip


def describe(exc: ValidationError) -> str:
    """`messages[1].content: must be ...` for a validation error's first problem."""
    error = exc.errors()[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    if error["type"] in _WANTED:
        problem = f"must be {_WANTED[error['type']]}, not {json_type(error.get('input'))}"
    elif error["type"] == "missing":
        problem = "is missing"
    else:
        problem = error["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
    return f"{path.lstrip('.')}: {problem}"


def read_rows(path: Path, form: str | None = None) -> list[dict[str, Any]]:
    """The training rows of a JSONL file (`.gz` too); a bad line names the file, line and
    field. With `form`, a row of another form is an error too."""
    if not path.is_file():
        raise InputError(str(path), "no such dataset file")
    rows = []
    for number, value in iter_jsonl(path):
        try:
            validate_row(value)
        except ValidationError as exc:
            raise InputError(str(path), describe(exc), f"line {number}") from None
        except ValueError as exc:
            raise InputError(str(path), f"not a training row: {exc}", f"line {number}") from None
        assert isinstance(value, dict)
        if form is not None and value["form"] != form:
            raise InputError(
                str(path), f"form: must be {form!r}, not {value['form']!r}", f"line {number}"
            )
        rows.append(value)
    return rows


def run_rows(runs: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """Training rows of stored runs (`household_rows`: a labelled mistake is never learned),
    each run's sequences checked by `chat_row` so that a bad run is named."""
    rows = []
    for run in runs:
        try:
            made = household_rows(run, writer="store")
            for messages, tools in sequences(made):
                chat_row({"messages": messages, "tools": tools})
        except ValueError as exc:
            raise UserError(f"run {run.id}: cannot be a training row: {exc}") from None
        rows += made
    return rows


def sequences(rows: Iterable[dict[str, Any]]) -> list[tuple[list[dict], list[dict]]]:
    """(messages, tools) per packed conversation (`pack_rows`), each assistant turn that is
    not learned marked `weight: 0`, the conversation cut after its last learned turn."""
    return [_marked(p.messages, p.learned, p.tools) for p in pack_rows(rows)]


def preference_pairs(rows: Iterable[dict[str, Any]]) -> list[tuple[Chat, Chat]]:
    """((prompt + chosen, tools), (prompt + rejected, tools)) per preference row, every
    assistant turn of the prompt marked `weight: 0`: only the two answers are learned."""
    pairs = []
    for row in rows:
        if row.get("form") != "preference":
            raise UserError(
                f"run {row.get('run_id')}: a {row.get('form')} row is not a preference pair"
            )
        prompt = [_context(m) for m in row["prompt"]]
        tools = _tool_list(row.get("tools"))
        assert isinstance(tools, list)
        pairs.append(((prompt + row["chosen"], tools), (prompt + row["rejected"], tools)))
    return pairs


def _context(message: dict) -> dict:
    return message | {"weight": 0} if message.get("role") == "assistant" else message


def _marked(
    messages: list[dict], learned: set[int], tools: list[dict]
) -> tuple[list[dict], list[dict]]:
    end = max(learned) + 1 if learned else 0
    marked = [
        m | {"weight": 0} if m["role"] == "assistant" and i not in learned else m
        for i, m in enumerate(messages[:end])
    ]
    return marked, tools

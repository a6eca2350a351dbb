"""Training rows: the one schema every trajforge writer emits (see README.md, "Training data").

Three forms, each the form TRL's trainers read unchanged:

- `messages` (+ `tools`): every assistant turn of the conversation is learned (SFT on whole
  successful runs);
- `prompt` / `completion` (+ `tools`): only the completion is learned: one assistant turn, the
  prompt being every message before it. Runs where some assistant turns must not be learned
  (a labelled mistake, a failed prefix, a non-action) become one such row per learned turn,
  so a mistake is only ever context, never a target;
- `prompt` / `chosen` / `rejected` (+ `tools`): a preference pair at one step.

In every form: `tools` is a list of tool schemas; tool-call arguments are JSON strings (the
OpenAI form); message content is a string; a `system` message can only be the first (a
later one, or feedback to the model, is a `user` message). Every row carries its provenance
in the same flat columns (`PROVENANCE_COLUMNS`): the run, the message indices of the learned
turns and of the prompt's end, the writer and, for rows made from a diagnosis, its method.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.errors import UserError
from trajforge.outputs import atomic_output
from trajforge.schema import Message, Trajectory

Writer = Literal[
    "rft", "recover", "aet-diagnosis", "aet-recovery", "lab", "store", "export", "pairs"
]
"""Which part of trajforge made a row."""
Form = Literal["messages", "prompt-completion", "preference"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCall(_Strict):
    name: str = Field(description="Tool name.")
    arguments: str = Field(description="Arguments as JSON text (the OpenAI form).")


class ChatToolCall(_Strict):
    id: str = Field(description="Call id; the tool message answering it has it as tool_call_id.")
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    """One message of a training row."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(description="Text (empty for a pure tool call).")
    tool_calls: list[ChatToolCall] | None = Field(
        default=None, description="Assistant messages: the calls made."
    )
    tool_call_id: str | None = Field(default=None, description="Tool messages: the call answered.")
    name: str | None = Field(
        default=None, description="Tool messages: the tool; others: the speaker (multi-agent)."
    )


class Provenance(_Strict):
    """Where a row comes from; the same columns in every form."""

    form: Form = Field(description="Which form the row is in.")
    writer: Writer = Field(description="The trajforge writer that made the row.")
    kind: str = Field(default="", description="The writer's finer label (a lab arm's data kind).")
    run_id: str = Field(description="The run (trajectory id) whose messages the row holds.")
    parent_run_id: str | None = Field(
        default=None, description="For a recovery fork: the failed run it continues."
    )
    task_id: str | None = Field(default=None, description="The run's task.")
    environment: str | None = Field(default=None, description="The run's environment.")
    learned: list[int] = Field(
        description="Message indices (in run_id) of the assistant turns the row teaches; a "
        "correction or chosen action replaces the message at its index."
    )
    masked: list[int] = Field(
        default_factory=list,
        description="Message indices of the run's assistant turns in the row's context that "
        "no row of the run learns: labelled mistakes, non-actions, and the prefix of a failed "
        "run before its diagnosed step or fork.",
    )
    prompt_end: int | None = Field(
        default=None,
        description="prompt-completion and preference rows: the prompt holds the run's "
        "messages [0, prompt_end) (then one feedback message where `feedback` is set).",
    )
    feedback: bool = Field(
        default=False, description="The prompt ends with a user message of diagnostic feedback."
    )
    method: str | None = Field(
        default=None, description="Rows from a diagnosis or fork: how the step was found."
    )
    diagnosis_id: str | None = Field(default=None, description="Rows from a stored diagnosis.")
    category: str | None = Field(default=None, description="That diagnosis's error category.")
    verified: bool | None = Field(default=None, description="Its correction was verified.")
    chosen_run_id: str | None = Field(
        default=None, description="Preference rows: the run the chosen turn comes from."
    )


class MessagesRow(Provenance):
    """Every assistant turn is learned."""

    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = Field(description="Tool schemas offered (OpenAI form).")

    @model_validator(mode="after")
    def _one_system(self) -> MessagesRow:
        _check_system(self.messages)
        return self


class PromptCompletionRow(Provenance):
    """Only the completion (assistant messages) is learned; the prompt is context."""

    prompt: list[ChatMessage]
    completion: list[ChatMessage]
    tools: list[dict[str, Any]]

    @model_validator(mode="after")
    def _completion_is_assistant(self) -> PromptCompletionRow:
        _check_system(self.prompt)
        if not self.completion or any(m.role != "assistant" for m in self.completion):
            raise ValueError("a completion holds assistant messages only")
        return self


class PreferenceRow(Provenance):
    """A preference pair at one step: the prompt, the chosen and the rejected next turn."""

    prompt: list[ChatMessage]
    chosen: list[ChatMessage]
    rejected: list[ChatMessage]
    tools: list[dict[str, Any]]

    @model_validator(mode="after")
    def _answers_are_assistant(self) -> PreferenceRow:
        _check_system(self.prompt)
        for answer in (self.chosen, self.rejected):
            if not answer or any(m.role != "assistant" for m in answer):
                raise ValueError("chosen and rejected hold assistant messages only")
        if self.chosen == self.rejected:
            raise ValueError("chosen and rejected are the same")
        return self


ROW_MODELS: dict[Form, type[Provenance]] = {
    "messages": MessagesRow,
    "prompt-completion": PromptCompletionRow,
    "preference": PreferenceRow,
}
PROVENANCE_COLUMNS = tuple(Provenance.model_fields)


def _check_system(messages: Sequence[ChatMessage]) -> None:
    if any(m.role == "system" for m in messages[1:]):
        raise ValueError("a system message can only be the first")


def json_schemas() -> dict[str, Any]:
    """The JSON Schema of each form (`trajforge schema --training`)."""
    return {form: model.model_json_schema() for form, model in ROW_MODELS.items()}


def chat_message(message: Message, first: bool = False) -> dict[str, Any]:
    """A run's message in the training form: string content, arguments as JSON text; a
    `system` message that is not the first becomes a `user` message."""
    role = "user" if message.role == "system" and not first else message.role
    data: dict[str, Any] = {"role": role, "content": message.text()}
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]  # fmt: skip
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.name:
        data["name"] = message.name
    return data


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [chat_message(m, first=i == 0) for i, m in enumerate(messages)]


def labelled_mistakes(traj: Trajectory) -> set[int]:
    """Message indices of the run's labelled errors (labels, and the deliberate errors a
    synthetic failure keeps in its metadata)."""
    indices = {label.message_index for label in traj.labels if label.message_index is not None}
    return indices | set(traj.metadata.get("deliberate_errors") or [])


def provenance(traj: Trajectory, writer: Writer, kind: str = "") -> dict[str, Any]:
    """The run-level provenance columns of a row made from `traj`."""
    recovery = traj.metadata.get("recovery") or {}
    parent = traj.metadata.get("recovered_from") or recovery.get("parent")
    if parent is None and traj.parent is not None:
        parent = traj.parent.trajectory_id
    return {
        "writer": writer,
        "kind": kind,
        "run_id": traj.id or traj.content_id(),
        "parent_run_id": parent,
        "task_id": traj.task.id,
        "environment": traj.task.environment,
    }


def run_rows(
    traj: Trajectory,
    writer: Writer,
    *,
    not_learned: Iterable[int] = (),
    actions_only: bool = False,
    kind: str = "",
) -> list[dict[str, Any]]:
    """The rows of one run: a `messages` row when every assistant turn is learned, else one
    prompt-completion row per learned turn. `not_learned` (with the run's labelled mistakes
    always added) are context only; with `actions_only`, so is assistant text without a
    tool call."""
    skip = set(not_learned) | labelled_mistakes(traj)
    steps = traj.assistant_indices()
    masked = [i for i in steps if i in skip or (actions_only and not traj.messages[i].tool_calls)]
    learned = [i for i in steps if i not in masked]
    base = provenance(traj, writer, kind)
    messages = chat_messages(traj.messages)
    if not masked:
        row = {"form": "messages", **base, "learned": learned, "messages": messages}
        return [checked(row | {"tools": list(traj.tools)})]
    return [
        checked({
            "form": "prompt-completion", **base, "learned": [index],
            "masked": [i for i in masked if i < index], "prompt_end": index,
            "prompt": messages[:index], "completion": [messages[index]], "tools": list(traj.tools),
        })
        for index in learned
    ]  # fmt: skip


def step_row(
    traj: Trajectory,
    step: int,
    completion: Message,
    writer: Writer,
    *,
    feedback: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A prompt-completion row at one step: the run's messages before `step` (and a user
    message of `feedback`) -> `completion`, the assistant turn that replaces message `step`."""
    prompt = chat_messages(traj.messages[:step])
    if feedback is not None:
        prompt.append({"role": "user", "content": feedback})
    masked = [i for i in traj.assistant_indices() if i < step]
    return checked({
        "form": "prompt-completion", **provenance(traj, writer, ""), "learned": [step],
        "masked": masked, "prompt_end": step, "feedback": feedback is not None,
        **(extra or {}), "prompt": prompt, "completion": [chat_message(completion)],
        "tools": list(tools if tools is not None else traj.tools),
    })  # fmt: skip


def preference_row(
    traj: Trajectory,
    step: int,
    chosen: Message,
    writer: Writer,
    *,
    method: str,
    kind: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """At message `step` of `traj`: prompt = the messages before it, chosen = `chosen`,
    rejected = the run's own message `step`."""
    prompt = chat_messages(traj.messages[:step])
    masked = [i for i in traj.assistant_indices() if i < step]
    return checked({
        "form": "preference", **provenance(traj, writer, kind), "learned": [step],
        "masked": masked, "prompt_end": step, "method": method, **(extra or {}),
        "prompt": prompt, "chosen": [chat_message(chosen)],
        "rejected": [chat_message(traj.messages[step])], "tools": list(traj.tools),
    })  # fmt: skip


def checked(row: dict[str, Any]) -> dict[str, Any]:
    """The row, validated against its form's model (a writer bug fails here, loudly)."""
    ROW_MODELS[row["form"]].model_validate(row)
    return row


def validate_row(row: Any) -> Provenance:
    """A parsed row of any form; raises ValueError naming what is wrong."""
    if not isinstance(row, dict):
        raise ValueError("a row is a JSON object")
    form = row.get("form")
    if form not in ROW_MODELS:
        raise ValueError(f"unknown form {form!r} (one of: {', '.join(ROW_MODELS)})")
    return ROW_MODELS[form].model_validate(row)


def write_rows(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Rows as JSONL, written to a temporary file and renamed into place; returns the count."""
    count = 0
    with atomic_output(path) as tmp, tmp.open("wb") as handle:
        for row in rows:
            handle.write(orjson.dumps(row) + b"\n")
            count += 1
    return count


def form_path(path: Path, form: Form) -> Path:
    """Where `write_forms` puts the rows of one form: `train.jsonl` -> `train.messages.jsonl`."""
    return path.with_name(f"{path.name.removesuffix('.jsonl')}.{form}.jsonl")


def write_forms(path: Path, rows: Iterable[dict[str, Any]]) -> dict[str, Path]:
    """Rows of mixed forms, one file per form (a trainer reads one form per dataset); a
    form with no rows leaves no file (an older one is removed). Returns form -> file."""
    by_form: dict[Form, list[dict[str, Any]]] = {}
    for row in rows:
        by_form.setdefault(row["form"], []).append(row)
    written: dict[str, Path] = {}
    for form in ROW_MODELS:
        target = form_path(path, form)
        if form in by_form:
            write_rows(target, by_form[form])
            written[form] = target
        else:
            target.unlink(missing_ok=True)
    return written


def row_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Rows, pairs, and the distinct (run, message) turns learned and masked."""
    counts = {"rows": 0, "pairs": 0}
    learned: set[tuple[str, int]] = set()
    masked: set[tuple[str, int]] = set()
    for row in rows:
        counts["rows"] += 1
        counts["pairs"] += row["form"] == "preference"
        if row["form"] != "preference":
            learned |= {(row["run_id"], i) for i in row["learned"]}
        masked |= {(row["run_id"], i) for i in row.get("masked") or []}
    return counts | {"learned_turns": len(learned), "masked_turns": len(masked)}


@dataclass
class Packed:
    """One conversation made of rows of one run: the rows, the messages, the positions of
    the learned turns in them, and the tools."""

    rows: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    learned: set[int]
    tools: list[dict[str, Any]]


def _conversation(row: dict[str, Any]) -> tuple[list[dict], set[int]]:
    """The row's whole conversation and the positions of its learned turns."""
    if row["form"] == "messages":
        messages = row["messages"]
        return messages, {i for i, m in enumerate(messages) if m["role"] == "assistant"}
    if row["form"] == "preference":
        raise UserError(
            f"run {row['run_id']}: a preference row (prompt/chosen/rejected) is for "
            "preference training (TRL's DPOTrainer), not SFT"
        )
    prompt, completion = row["prompt"], row["completion"]
    return prompt + completion, set(range(len(prompt), len(prompt) + len(completion)))


def pack_rows(rows: Iterable[dict[str, Any]]) -> list[Packed]:
    """Rows as whole conversations: rows of one run whose conversations start one another
    (one row per learned turn) become one conversation with every learned turn of them, in
    the order of each conversation's first row."""
    listed = list(rows)
    conversations = [_conversation(row) for row in listed]
    packed: list[tuple[int, Packed]] = []
    by_run: dict[str, list[int]] = {}
    for index in sorted(range(len(listed)), key=lambda i: -len(conversations[i][0])):
        row, (messages, learned) = listed[index], conversations[index]
        runs = by_run.setdefault(row["run_id"], [])
        target = next((k for k in runs if _starts(packed[k][1], messages, row["tools"])), None)
        if target is None:
            runs.append(len(packed))
            packed.append((index, Packed([row], messages, set(learned), row["tools"])))
            continue
        first, conversation = packed[target]
        conversation.learned |= learned
        conversation.rows.append(row)
        packed[target] = (min(first, index), conversation)
    return [conversation for _, conversation in sorted(packed, key=lambda item: item[0])]


def _starts(longer: Packed, messages: list[dict], tools: list[dict]) -> bool:
    return longer.tools == tools and longer.messages[: len(messages)] == messages


MESSAGE_COLUMNS = ("messages", "prompt", "completion", "chosen", "rejected", "tools")
"""Columns of messages or tool schemas (decoded by `datasets` as JSON objects)."""
COLUMN_TYPES = {"learned": "indices", "masked": "indices", "prompt_end": "int64",
                "feedback": "bool", "verified": "bool"}  # fmt: skip
"""The other columns that are not strings."""


def dataset_features() -> Any:
    """The Hugging Face `datasets` features of every column of every form: pass them to
    `load_dataset("json", data_files=[...], features=...)` to load files of different
    forms and writers together (a column a form lacks is null)."""
    from datasets import Features, Json, List, Value

    columns: dict[str, Any] = {}
    for model in ROW_MODELS.values():
        for name in model.model_fields:
            kind = COLUMN_TYPES.get(name, "string")
            if name in MESSAGE_COLUMNS:
                columns[name] = List(Json())
            else:
                columns[name] = List(Value("int64")) if kind == "indices" else Value(kind)
    return Features(columns)

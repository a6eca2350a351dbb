"""Training rows in, the sequences `train_sft` trains on out.

`read_rows` reads a JSONL file of training rows (`trajforge.generate.rows`; each line is
validated, a bad line is named). `sequences` turns rows into (messages, tools) pairs in
which an assistant turn that is not learned carries `weight: 0` (what the codecs mask), by
the rule of each form: in a `messages` row every assistant turn is learned; in a
prompt-completion row only the completion is. Prompt-completion rows of one run whose
conversations extend one another (a run cut into one row per learned turn) are packed back
into one sequence: the same tokens carry loss, computed in one pass. Preference rows are
for preference training and are refused here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from trajforge.errors import UserError
from trajforge.generate.rows import validate_row

Sequence_ = tuple[list[dict], list[dict]]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The training rows of a JSONL file; one `UserError` names the first bad line."""
    if not path.is_file():
        raise UserError(f"{path}: no such dataset file")
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
            validate_row(row)
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{path}: line {number} is not JSON ({exc})") from None
        except (ValidationError, ValueError) as exc:
            first = str(exc).splitlines()
            detail = " ".join(first[:3]) if first else type(exc).__name__
            raise UserError(f"{path}: line {number} is not a training row: {detail}") from None
        rows.append(row)
    return rows


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


def sequences(rows: Iterable[dict[str, Any]]) -> list[Sequence_]:
    """(messages, tools) per sequence, unlearned assistant turns marked `weight: 0`; in the
    order of each sequence's first row."""
    listed = list(rows)
    conversations = [_conversation(row) for row in listed]
    packed: list[tuple[int, list[dict], set[int], list[dict]]] = []
    by_run: dict[str, list[int]] = {}
    for index in sorted(range(len(listed)), key=lambda i: -len(conversations[i][0])):
        row, (messages, learned) = listed[index], conversations[index]
        target = _extended(packed, by_run.get(row["run_id"], []), messages, row["tools"])
        if target is None:
            by_run.setdefault(row["run_id"], []).append(len(packed))
            packed.append((index, messages, set(learned), row["tools"]))
        else:
            first, longer, known, tools = packed[target]
            packed[target] = (min(first, index), longer, known | learned, tools)
    packed.sort(key=lambda item: item[0])
    return [_marked(messages, learned, tools) for _, messages, learned, tools in packed]


def _extended(packed, candidates: list[int], messages: list[dict], tools: list[dict]):
    """The packed sequence (of the same run) whose conversation starts with `messages`."""
    for index in candidates:
        _, longer, _, longer_tools = packed[index]
        if longer_tools == tools and longer[: len(messages)] == messages:
            return index
    return None


def _marked(messages: list[dict], learned: set[int], tools: list[dict]) -> Sequence_:
    """The conversation up to its last learned turn; other assistant turns `weight: 0`."""
    end = max(learned) + 1 if learned else 0
    marked = [
        m | {"weight": 0} if m["role"] == "assistant" and i not in learned else m
        for i, m in enumerate(messages[:end])
    ]
    return marked, tools

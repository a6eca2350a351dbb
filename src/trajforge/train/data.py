"""Training rows in, the sequences `train_sft` trains on out.

`read_rows` reads a JSONL file of training rows (`trajforge.generate.rows`; each line is
validated, a bad line is named). `sequences` turns rows into (messages, tools) pairs in
which an assistant turn that is not learned carries `weight: 0` (what the codecs mask), by
the rule of each form: in a `messages` row every assistant turn is learned; in a
prompt-completion row only the completion is. Rows of one run cut into one row per learned
turn are packed back into one sequence (`pack_rows`): the same tokens carry loss, computed
in one pass. Preference rows are for preference training and are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from trajforge.errors import UserError
from trajforge.generate.rows import pack_rows, validate_row

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


def sequences(rows: Iterable[dict[str, Any]]) -> list[Sequence_]:
    """(messages, tools) per packed conversation (`pack_rows`), each assistant turn that is
    not learned marked `weight: 0`, the conversation cut after its last learned turn."""
    return [_marked(p.messages, p.learned, p.tools) for p in pack_rows(rows)]


def _marked(messages: list[dict], learned: set[int], tools: list[dict]) -> Sequence_:
    end = max(learned) + 1 if learned else 0
    marked = [
        m | {"weight": 0} if m["role"] == "assistant" and i not in learned else m
        for i, m in enumerate(messages[:end])
    ]
    return marked, tools

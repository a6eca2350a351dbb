"""Training data from any store query (`trajforge export --format sft|openai|dpo`).

- `sft`: training rows (`trajforge.generate.rows`), one file per form beside the output
  name (`OUT.messages.jsonl`, `OUT.prompt-completion.jsonl`). A successful run gives its rows (one
  `messages` row, or prompt-completion rows around its labelled mistakes); a failed run with
  a stored, verified diagnosis whose correction is an action gives one recovery row (the
  messages before the decisive step + the diagnostic feedback -> the correction). Other
  failed runs give nothing.
- `dpo`: preference pairs at one step (`trajforge.generate.pairs`): a failed run with a
  verified diagnosis whose correction is an action gives chosen = the correction, rejected =
  the run's action; rollouts of one task give pairs where a passing and a failing one part.
- `openai`: the same data as `sft` in OpenAI's chat fine-tuning form, one conversation per line
  (`messages`, `tools`), every assistant message weighted `weight: 1` (learned) or `0`
  (context), the rows of one run packed back into one conversation. OpenAI's format has no
  room for provenance, so it goes line by line into `<out>.provenance.jsonl`. Every line is
  checked by `trajforge.export.openai_check` before the file is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.storage import load_diagnoses
from trajforge.errors import UserError
from trajforge.export.openai_check import check_openai_line
from trajforge.export.tables import atomic_path
from trajforge.generate.pairs import correction_pair, sibling_pairs
from trajforge.generate.rows import Packed, pack_rows, run_rows, write_forms, write_rows
from trajforge.generate.views import recovery_item
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

PROVENANCE_SUFFIX = ".provenance.jsonl"


def training_rows(store: Store, flt: TrajectoryFilter) -> Iterator[dict[str, Any]]:
    """The rows of the selected runs: successes' own rows, verified recoveries of failures."""
    failures: list[Trajectory] = []
    for traj in store.query(flt):
        if traj.outcome.success:
            yield from run_rows(traj, "export", kind="success")
        elif traj.outcome.success is False:
            failures.append(traj)
    diagnoses = _verified(load_diagnoses(store, [t.id for t in failures], verified_only=True))
    for traj in failures:
        row = next((r for d in diagnoses.get(traj.id, []) if (r := _recovery(traj, d))), None)
        if row is not None:
            yield row


def _verified(diagnoses: list[Diagnosis]) -> dict[str, list[Diagnosis]]:
    """Verified diagnoses per run, the newest first."""
    by_run: dict[str, list[Diagnosis]] = {}
    for diagnosis in sorted(diagnoses, key=lambda d: -d.created_at):
        by_run.setdefault(diagnosis.trajectory_id, []).append(diagnosis)
    return by_run


def _recovery(traj: Trajectory, diagnosis: Diagnosis) -> dict[str, Any] | None:
    row = recovery_item(traj, diagnosis)
    return row | {"writer": "export", "kind": "recovery"} if row is not None else None


def _nonempty(rows: list[dict[str, Any]], store: Store, flt: TrajectoryFilter) -> None:
    if not rows:
        raise UserError(
            f"no training data: none of the {store.count(flt)} selected runs is a success or a "
            "failure with a verified correction (run `trajforge diagnose` first); nothing written"
        )


def pair_rows(store: Store, flt: TrajectoryFilter) -> list[dict[str, Any]]:
    """Preference pairs of the selected runs: verified corrections, then siblings."""
    trajs = list(store.query(flt))
    failures = [t for t in trajs if t.outcome.success is False]
    diagnoses = _verified(load_diagnoses(store, [t.id for t in failures], verified_only=True))
    rows = []
    for traj in failures:
        found = (correction_pair(traj, d) for d in diagnoses.get(traj.id, []))
        row = next((r for r in found if r is not None), None)
        if row is not None:
            rows.append(row)
    return rows + sibling_pairs(trajs)


def export_dpo(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """Preference pairs of the selected runs to `out`; returns the number of pairs."""
    rows = pair_rows(store, flt)
    if not rows:
        raise UserError(
            f"no preference pairs: none of the {store.count(flt)} selected runs is a failure "
            "with a verified correction that is an action, nor a failure with a passing "
            "sibling on its task; nothing written"
        )
    return write_rows(out, rows)


def export_sft(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """Training rows of the selected runs, a file per form beside `out` (`out.messages.jsonl`,
    `out.prompt-completion.jsonl`); returns the number of rows."""
    rows = list(training_rows(store, flt))
    _nonempty(rows, store, flt)
    write_forms(out, rows)
    return len(rows)


def export_openai(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """The selected runs' training data in OpenAI's fine-tuning chat form; returns lines."""
    rows = list(training_rows(store, flt))
    _nonempty(rows, store, flt)
    return write_openai(pack_rows(rows), out)


def write_openai(conversations: Iterable[Packed], out: Path) -> int:
    """OpenAI chat lines (each checked) to `out`, their provenance to the sidecar file."""
    sidecar = out.with_name(out.name.removesuffix(".jsonl") + PROVENANCE_SUFFIX)
    count = 0
    with (
        atomic_path(out) as tmp,
        atomic_path(sidecar) as side_tmp,
        tmp.open("wb") as handle,
        side_tmp.open("wb") as side,
    ):
        for conversation in conversations:
            count += 1
            line = openai_line(conversation)
            check_openai_line(line, f"{out}: line {count}")
            handle.write(orjson.dumps(line) + b"\n")
            side.write(orjson.dumps(_provenance(conversation, count)) + b"\n")
    return count


def openai_line(conversation: Packed) -> dict[str, Any]:
    """One conversation in OpenAI's form: assistant messages weighted 1 or 0, content null
    on a pure tool call, no tool names on tool messages."""
    messages = []
    for index, message in enumerate(conversation.messages[: max(conversation.learned) + 1]):
        data = {k: v for k, v in message.items() if not (k == "name" and message["role"] == "tool")}
        if message["role"] == "assistant":
            if message.get("tool_calls") and not message["content"]:
                data["content"] = None
            data["weight"] = 1 if index in conversation.learned else 0
        messages.append(data)
    line: dict[str, Any] = {"messages": messages}
    if conversation.tools:
        line["tools"] = conversation.tools
    return line


def _provenance(conversation: Packed, line: int) -> dict[str, Any]:
    first = conversation.rows[0]
    keep = ("writer", "kind", "run_id", "parent_run_id", "task_id", "environment", "method",
            "feedback")  # fmt: skip
    return {
        "line": line,
        **{key: first.get(key) for key in keep},
        "diagnosis_id": first.get("diagnosis_id"),
        "learned": sorted({i for row in conversation.rows for i in row["learned"]}),
        "masked": sorted({i for row in conversation.rows for i in row.get("masked") or []}),
    }

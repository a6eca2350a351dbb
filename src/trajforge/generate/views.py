"""AET stage 5: training views from diagnosed failures, and their dataset card.

- diagnosis view: the run up to the decisive step (as a transcript in one user message) ->
  the diagnosis as JSON (step, agent, category, explanation, cited evidence);
- actor-recovery view: the run's messages before the decisive step + diagnostic feedback (a
  user message) -> the corrected action (a tool call, or a message from an oracle or gold
  run; heuristic advice text is never a target), with the tool schemas the agent had (those
  recorded in the run, else its environment's).

Both are prompt-completion rows of the training-row schema (`trajforge.generate.rows`): only
the completion is learned, the prefix's own assistant turns are context. Each row carries
the run, the diagnosis (id, method, category, verified) and the message indices. Only
verified diagnoses are written unless `verified_only=False`. The card counts items by
environment, harness, model and category (markdown and JSON).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.diagnose.forking import tool_schemas
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.taxonomy import taxonomy_text
from trajforge.diagnose.transcript import transcript
from trajforge.generate.rows import checked, provenance, step_row, write_rows
from trajforge.schema import Trajectory

DIAGNOSIS_FILE = "diagnosis.jsonl"
RECOVERY_FILE = "recovery.jsonl"
CARD_FILES = ("dataset_card.md", "dataset_card.json")

DIAGNOSIS_SYSTEM = (
    "You analyse failed runs of tool-using agents. Given a run up to a step, say whether and "
    "how that step is the decisive error: answer with JSON {step, agent, category, "
    "explanation, evidence: [{message_index, note}]}. Categories:\n" + taxonomy_text()
)


class ViewsConfig(BaseModel):
    """What goes into the views."""

    verified_only: bool = Field(default=True, description="Write verified diagnoses only.")
    max_chars: int = Field(default=4000, description="Longer messages are shortened in prompts.")


def diagnosis_json(diagnosis: Diagnosis) -> str:
    """The target of the diagnosis view."""
    return orjson.dumps(
        {
            "step": diagnosis.step,
            "agent": diagnosis.agent,
            "category": diagnosis.category,
            "explanation": diagnosis.explanation,
            "evidence": [
                {"message_index": e.message_index, "note": e.note} for e in diagnosis.evidence
            ],
        }
    ).decode()


def _diagnosis_columns(diagnosis: Diagnosis) -> dict[str, Any]:
    return {
        "method": diagnosis.method,
        "diagnosis_id": diagnosis.id,
        "category": diagnosis.category,
        "verified": diagnosis.verified,
    }


def diagnosis_item(traj: Trajectory, diagnosis: Diagnosis, config: ViewsConfig) -> dict:
    """Prefix up to (and including) the decisive step -> diagnosis JSON."""
    step = diagnosis.step if diagnosis.step is not None else len(traj.messages) - 1
    ask = f"the run ended after message {step}" if diagnosis.omission else f"message {step}"
    question = (
        f"Task: {traj.task.instruction or traj.task.id}\n\nRun so far:\n"
        f"{transcript(traj.messages[: step + 1], config.max_chars)}\n\n"
        f"The run failed. Diagnose {ask}."
    )
    return checked({
        "form": "prompt-completion", **provenance(traj, "aet-diagnosis"), "learned": [],
        "prompt_end": step + 1, **_diagnosis_columns(diagnosis),
        "prompt": [{"role": "system", "content": DIAGNOSIS_SYSTEM},
                   {"role": "user", "content": question}],
        "completion": [{"role": "assistant", "content": diagnosis_json(diagnosis)}],
        "tools": [],
    })  # fmt: skip


def feedback_text(diagnosis: Diagnosis) -> str:
    """The diagnostic feedback given to the actor before its corrected action."""
    return (
        f"Feedback on your next step: a previous attempt failed here ({diagnosis.category}). "
        f"{diagnosis.explanation}. Take the right action now."
    )


def recovery_item(traj: Trajectory, diagnosis: Diagnosis) -> dict | None:
    """Prefix before the decisive step + feedback -> corrected action (None without one).

    Only an action is a target: a correction that is advice text from a heuristic (not a
    tool call, nor a message from an oracle or gold run) makes no item.
    """
    correction = diagnosis.correction
    if correction is None or diagnosis.step is None:
        return None
    if correction.tool_call is None and correction.source not in ("oracle", "gold"):
        return None
    return step_row(
        traj,
        diagnosis.step,
        correction.as_message(),
        "aet-recovery",
        feedback=feedback_text(diagnosis),
        tools=tool_schemas(traj),
        extra=_diagnosis_columns(diagnosis),
    )


def write_views(
    pairs: list[tuple[Trajectory, Diagnosis]], out_dir: Path, config: ViewsConfig | None = None
) -> dict[str, Any]:
    """Write both views and the dataset card into `out_dir`; returns the card."""
    config = config or ViewsConfig()
    kept = [
        (t, d) for t, d in pairs if d.step is not None and (d.verified or not config.verified_only)
    ]
    diagnosis_rows = [diagnosis_item(t, d, config) for t, d in kept]
    recovery_rows = [row for t, d in kept if (row := recovery_item(t, d)) is not None]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_rows(out_dir / DIAGNOSIS_FILE, diagnosis_rows)
    write_rows(out_dir / RECOVERY_FILE, recovery_rows)
    card = dataset_card(pairs, kept, len(recovery_rows), config)
    (out_dir / CARD_FILES[1]).write_bytes(orjson.dumps(card, option=orjson.OPT_INDENT_2))
    (out_dir / CARD_FILES[0]).write_text(card_markdown(card))
    return card


def _counts(values: list[str | None]) -> dict[str, int]:
    return dict(Counter(v or "unknown" for v in values).most_common())


def dataset_card(
    pairs: list[tuple[Trajectory, Diagnosis]],
    kept: list[tuple[Trajectory, Diagnosis]],
    recovery_items: int,
    config: ViewsConfig,
) -> dict[str, Any]:
    """Counts of the written items by environment, harness, model and category."""
    return {
        "diagnosed_runs": len(pairs),
        "verified_runs": sum(d.verified for _, d in pairs),
        "verified_only": config.verified_only,
        "diagnosis_items": len(kept),
        "recovery_items": recovery_items,
        "by_environment": _counts([t.task.environment for t, _ in kept]),
        "by_harness": _counts([t.source.harness for t, _ in kept]),
        "by_model": _counts([t.source.model for t, _ in kept]),
        "by_category": _counts([d.category for _, d in kept]),
        "by_method": _counts([d.method for _, d in kept]),
        "by_verification": _counts(
            [d.verification.method if d.verification else None for _, d in kept]
        ),
        "files": [DIAGNOSIS_FILE, RECOVERY_FILE],
    }


def card_markdown(card: dict[str, Any]) -> str:
    """The dataset card as markdown."""
    lines = [
        "# trajforge error-to-training dataset",
        "",
        f"{card['diagnosis_items']} diagnosis items and {card['recovery_items']} actor-recovery "
        f"items from {card['diagnosed_runs']} diagnosed failed runs "
        f"({card['verified_runs']} with a verified correction; "
        f"{'verified items only' if card['verified_only'] else 'all items'}).",
        "",
        f"- `{DIAGNOSIS_FILE}`: run prefix up to the decisive step -> diagnosis JSON.",
        f"- `{RECOVERY_FILE}`: run prefix + diagnostic feedback -> corrected action.",
        "",
        "Rows are prompt-completion rows of trajforge's training-row schema (`trajforge "
        "schema --training`): `prompt`, `completion` (the only learned part), `tools` (a list "
        "of tool schemas) and the provenance columns (run_id, learned, prompt_end, "
        "diagnosis_id, method, category, verified, ...).",
    ]
    for key in ("by_environment", "by_harness", "by_model", "by_category", "by_method"):
        lines += ["", f"## {key.removeprefix('by_')}", "", "| value | items |", "|---|---|"]
        lines += [f"| {name} | {count} |" for name, count in card[key].items()]
    return "\n".join(lines) + "\n"

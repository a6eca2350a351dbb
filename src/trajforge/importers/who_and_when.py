"""Who&When failure-attribution runs (mingyin1/Agents_Failure_Attribution).

A file holds one failed multi-agent run (CaptainAgent on GAIA / AssistantBench questions):
`{question, question_ID, level, ground_truth, is_correct, history[{role, name, content}],
mistake_agent, mistake_step, mistake_reason, system_prompt{agent: text}}`, sometimes with
`labels` (an error category).

Step mapping: messages are `history` one to one, so message index == the dataset's step
number. `mistake_step` (a string in the data) is the index into `history`; it becomes a
human `Label` at that message index, with `mistake_agent` as the agent, `mistake_reason`
as the reason and `labels` (when present) as the category. The labelled agent is kept as
annotated even where it differs from the speaker of that message (three files).

The question becomes the task instruction, `ground_truth` the gold answer, and the
per-agent system prompts go to `metadata["system_prompts"]` (they were not part of
`history`). The run folder (`Algorithm-Generated`, `Hand-Crafted`) becomes `source.run`.

The hand-crafted subset (Magentic-One runs) puts the speaker in `role` instead:
`"human"`, `"Orchestrator (thought)"`, `"Orchestrator (-> WebSurfer)"`, `"WebSurfer"`...,
has `is_corrected` instead of `is_correct` and no `system_prompt`. There the speaker
(without its parenthesised step kind) becomes the message `name`, `human` becomes a user
message and every agent an assistant one, and the speaker as written stays in
`extra["speaker"]`. Agent names are kept as the data spells them (the labels say
`Websurfer` where the messages say `WebSurfer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajforge.importers.base import read_one_run, short_repr
from trajforge.openai_wire import message_list
from trajforge.schema import Label, Outcome, Source, Task, Trajectory

_CONSUMED = {
    "question",
    "question_ID",
    "ground_truth",
    "history",
    "mistake_agent",
    "mistake_step",
    "mistake_reason",
    "system_prompt",
    "labels",
    "is_correct",
    "is_corrected",
}
_CHAT_ROLES = {"system", "user", "assistant", "tool"}
_HUMAN = "human"


class WhoAndWhenImporter:
    name = "who-and-when"
    description = "Who&When run ({question, history, mistake_agent, mistake_step, ...})"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.lstrip()[:1] != b"{" or b'"history"' not in head:
            return False
        return b'"question_ID"' in head or b'"mistake_step"' in head

    def read(self, path: Path) -> Iterator[Trajectory]:
        yield read_one_run(path, _to_trajectory)

    def sidecars(self, path: Path) -> list[Path]:
        return []


def _to_trajectory(data: dict[str, Any], path: Path) -> Trajectory:
    messages = message_list(_speaker_history(data["history"]), "history")
    correct = _truth(data, "is_correct" if "is_correct" in data else "is_corrected")
    # the messages are raw fields: pydantic validates them once, with the trajectory
    return Trajectory.model_validate(
        dict(
            task=Task(
                id=str(data.get("question_ID") or path.stem),
                environment="who-and-when",
                instruction=data.get("question"),
                gold=data.get("ground_truth"),
                data={"level": data.get("level")},
            ),
            source=Source(
                harness="captain-agent" if "system_prompt" in data else "magentic-one",
                run=path.parent.name or None,
                file=str(path),
                format="who-and-when",
            ),
            messages=messages,
            outcome=Outcome(
                success=correct,
                reward=None if correct is None else float(correct),
                judged_by="who-and-when-ground-truth",
            ),
            labels=[_label(data, len(messages))],
            metadata={"system_prompts": data.get("system_prompt") or {}}
            | {k: v for k, v in data.items() if k not in _CONSUMED},
        )
    )


def _speaker_history(history: Any) -> Any:
    """`history` with Magentic-One speakers (`role: "WebSurfer"`) turned into chat messages."""
    if not isinstance(history, list):
        return history
    return [_speaker_message(record) for record in history]


def _speaker_message(record: Any) -> Any:
    if not isinstance(record, dict) or "name" in record:
        return record
    speaker = record.get("role")
    if not isinstance(speaker, str) or speaker in _CHAT_ROLES:
        return record
    agent = speaker.split(" (", 1)[0].strip() or speaker
    role = "user" if agent == _HUMAN else "assistant"
    return record | {"role": role, "name": agent, "extra": {"speaker": speaker}}


def _truth(data: dict[str, Any], key: str) -> bool | None:
    """A yes/no field that may be written as a JSON boolean or as "true"/"false"."""
    value = data.get(key)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{key}: expected true or false, got {short_repr(value)}")


def _label(data: dict[str, Any], n_messages: int) -> Label:
    raw_step = data["mistake_step"]
    try:
        step = int(raw_step)
    except (TypeError, ValueError):
        raise ValueError(f"mistake_step: not a step number: {short_repr(raw_step)}") from None
    if not 0 <= step < n_messages:
        raise ValueError(f"mistake_step: {step} is outside history (0..{n_messages - 1})")
    category = data.get("labels")
    return Label(
        message_index=step,
        agent=data.get("mistake_agent"),
        category=category if isinstance(category, str) else None,
        reason=data.get("mistake_reason"),
        source="human",
    )

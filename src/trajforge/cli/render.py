"""Readable rendering of a trajectory for the terminal."""

from __future__ import annotations

import time
from collections import defaultdict

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from trajforge.schema import Label, Message, Trajectory

ROLE_STYLES = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "yellow"}
SHORT_LIMIT = 1200


def render_trajectory(console: Console, traj: Trajectory, full: bool = False) -> None:
    console.print(_header(traj))
    notes = _notes_by_index(traj)
    for index, message in enumerate(traj.messages):
        console.print(_message_panel(index, message, notes.get(index, []), full))
    for note in notes.get(None, []):
        console.print(note)


def _header(traj: Trajectory) -> Panel:
    lines = [
        f"[bold]{traj.id}[/]  task {traj.task.id} ({traj.task.environment or '?'})",
        _source_line(traj),
        _outcome_line(traj),
        _size_line(traj),
    ]
    if traj.parent:
        lines.append(f"fork of {traj.parent.trajectory_id} at message {traj.parent.message_index}")
    if traj.task.instruction:
        lines.append(Text(_shorten(traj.task.instruction, 600, False), style="italic").markup)
    return Panel("\n".join(lines), title="trajectory")


def _source_line(traj: Trajectory) -> str:
    src = traj.source
    named = [("source", src.harness), ("model", src.model), ("run", src.run)]
    return " · ".join(f"{key} {value}" for key, value in named if value) or "source unknown"


def _outcome_line(traj: Trajectory) -> str:
    """Verdict, reward, judge and end reason; parts that are unknown are left out."""
    outcome = traj.outcome
    verdict = {
        "success": "[green]success[/]",
        "failure": "[red]failure[/]",
        "model_error": "[yellow]model error[/] (the model could not be reached: not judged)",
        "unjudged": "outcome unknown",
    }
    parts = [verdict[outcome.status]]
    if outcome.reward is not None:
        parts.append(f"reward {outcome.reward:g}")
    if outcome.judged_by:
        parts.append(f"judged by {outcome.judged_by}")
    if outcome.termination_reason:
        parts.append(f"ended: {outcome.termination_reason}")
    return " · ".join(parts)


def _size_line(traj: Trajectory) -> str:
    parts = [f"{len(traj.messages)} messages", f"{len(traj.assistant_indices())} steps"]
    if traj.usage.total_tokens is not None:
        parts.append(f"{traj.usage.total_tokens} tokens")
    return " · ".join(parts)


def _notes_by_index(traj: Trajectory) -> dict[int | None, list[Text]]:
    notes: dict[int | None, list[Text]] = defaultdict(list)
    for label in traj.labels:
        notes[label.message_index].append(Text(_label_text(label), style="bold red"))
    for fault in traj.faults:
        text = f"⚡ injected fault {fault.kind} on {fault.tool or '?'}: {fault.detail or ''}"
        notes[fault.message_index].append(Text(text, style="bold magenta"))
    return notes


def _label_text(label: Label) -> str:
    who = [f"agent {label.agent}"] if label.agent else []
    who += [f"category {label.category}"] if label.category else []
    where = "" if label.message_index is not None else " (whole run)"
    details = f" ({', '.join(who)})" if who else ""
    return f"⚑ {label.source} label{where}{details}: {label.reason or ''}"


def _message_panel(index: int, message: Message, notes: list[Text], full: bool) -> Panel:
    parts: list[Text] = [Text(_shorten(message.text(), SHORT_LIMIT, full))]
    for call in message.tool_calls or []:
        parts.append(Text(f"→ {call.name}({_shorten(call.arguments, 400, full)})", style="bold"))
    parts.extend(notes)
    title = f"[{index}] {message.role}" + (f" · {message.name}" if message.name else "")
    if message.tool_call_id:
        title += f" ← {message.tool_call_id}"
    if notes:
        title += " ⚑"
    border = "red" if notes else ROLE_STYLES[message.role]
    return Panel(Group(*parts), title=title, title_align="left", border_style=border)


def _shorten(text: str, limit: int, full: bool) -> str:
    if full or len(text) <= limit:
        return text
    hidden = f"… [{len(text) - limit} characters hidden; --full shows all] …"
    return f"{text[: limit // 2]}\n{hidden}\n{text[-limit // 2 :]}"


VERIFIED_MEANS = (
    "verified = the correction at the decisive message passes (fork: the expert continuing "
    "after it succeeds; evidence: cited messages and the call's schema check out); it does "
    "not say this is the run's first mistake"
)


def render_diagnoses(console: Console, diagnoses: list) -> None:
    """Stored AET diagnoses of the run (see `trajforge diagnose`)."""
    for d in diagnoses:
        omission = " (omission)" if d.omission else ""
        parts = [
            Text(f"decisive message {d.step}{omission} · agent {d.agent} · category {d.category}"),
            Text(d.explanation),
        ]
        if d.point_of_no_return is not None:
            parts.append(
                Text(
                    f"point of no return: message {d.point_of_no_return} (the last message from "
                    "which the expert still succeeds)"
                )
            )
        parts.extend(_deviation_lines(d.first_deviation))
        if d.correction is not None:
            parts.append(Text(f"correction at message {d.step}: {d.correction.text()}"))
        if d.verification is not None:
            verdict = d.verification
            style = "green" if verdict.verified else "red"
            state = "verified" if verdict.verified else "not verified"
            parts.append(Text(f"{state} by {verdict.method}: {verdict.detail}", style))
            parts.append(Text(VERIFIED_MEANS, "dim"))
        console.print(Panel(Group(*parts), title=f"diagnosis ({d.method})", border_style="red"))


def _deviation_lines(found) -> list[Text]:
    if found is None:
        return []
    lines = [
        Text(
            f"first deviation: message {found.message_index} ({found.reason}: {found.detail})",
            "bold",
        )
    ]
    if found.correction is not None:
        lines.append(Text(f"correction there: {found.correction.text()}"))
    if found.repaired is not None:
        lines.append(Text(found.repair_detail, "green" if found.repaired else "yellow"))
    return lines


def render_metadata_changes(console: Console, changes: list) -> None:
    """The logged metadata changes of the run (see `trajforge set`)."""
    if not changes:
        return
    lines = []
    for c in changes:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.changed_at))
        old, new = _field_value(c.field, c.old_value), _field_value(c.field, c.new_value)
        lines.append(Text(f"{when} UTC {c.changed_by}: {c.field} {old} -> {new} ({c.command})"))
    console.print(Panel(Group(*lines), title="metadata changes", border_style="blue"))


def _field_value(field: str, value: object) -> str:
    if field == "labels" and isinstance(value, list):
        return f"{len(value)} labels"
    return "unknown" if value is None else str(value)

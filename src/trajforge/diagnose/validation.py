"""The validation log: checkable findings about a run, computed without a model.

The evidence-first judge reads this log before it names a decisive step and must cite the
findings it relies on by id (`E1`, `E2`, ...). Kinds of finding:

| kind | what was checked |
|---|---|
| `tool_error` | a tool or code-execution result reports an error |
| `contradicted_claim` | an agent claims success right after a result that reported an error |
| `schema_violation` | a call names an unknown tool or breaks its JSON schema |
| `policy_violation` | tau policy: a write before authenticating, or without an explicit yes |
| `repeated_action` | the same call (name and arguments) or the same agent message made again |
| `unsupported_final_answer` | a final answer given before any tool or code result succeeded |
| `fabrication_marker` | an agent says it uses hypothetical, sample, simulated or placeholder data |
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from trajforge.diagnose.evidence import (
    calls_with_results,
    canonical_arguments,
    excerpt,
    is_error_text,
)
from trajforge.diagnose.heuristics.tool_log import unauthenticated_write, unconfirmed_write
from trajforge.diagnose.schema_check import call_problems
from trajforge.schema import Message, Trajectory

FindingKind = Literal[
    "tool_error",
    "contradicted_claim",
    "schema_violation",
    "policy_violation",
    "repeated_action",
    "unsupported_final_answer",
    "fabrication_marker",
]
RawFinding = tuple[FindingKind, int, str]
_SUCCESS_CLAIM = re.compile(
    r"\b(successfully|has been (cancel|updat|modif|exchang|return|book|chang)\w*|"
    r"is now (cancel|updat|book|confirm)\w*|done|completed)\b",
    re.IGNORECASE,
)
_FINAL = re.compile(r"TERMINATE|final answer|the answer is", re.IGNORECASE)
_FABRICATED = re.compile(
    r"hypothetical|sample data|simulat|placeholder|dummy data|mock data", re.IGNORECASE
)
_TERMINALS = {"computer_terminal", "terminal", "executor", "code_executor"}


class Finding(BaseModel):
    """One checkable fact about the run."""

    id: str = Field(description="E1, E2, ... in message order; what the judge cites.")
    kind: FindingKind
    message_index: int = Field(description="The message the finding is about.")
    text: str = Field(description="What was found, with a short excerpt.")


def _is_result(message: Message) -> bool:
    return message.role == "tool" or (message.name or "").lower() in _TERMINALS


def _tool_errors(traj: Trajectory) -> list[RawFinding]:
    return [
        ("tool_error", i, f"result reports an error: {excerpt(m.text(), 120)}")
        for i, m in enumerate(traj.messages)
        if _is_result(m) and is_error_text(m.text())
    ]


def _contradicted_claims(traj: Trajectory) -> list[RawFinding]:
    found: list[RawFinding] = []
    last_error: int | None = None
    for i, message in enumerate(traj.messages):
        if _is_result(message):
            last_error = i if is_error_text(message.text()) else None
        elif message.role == "assistant" and last_error is not None:
            claim = _SUCCESS_CLAIM.search(message.text())
            if claim:
                text = (
                    f"claims '{claim.group(0)}' right after message {last_error} reported an error"
                )
                found.append(("contradicted_claim", i, text))
            last_error = None
    return found


def _schema_violations(traj: Trajectory, tools: list[dict]) -> list[RawFinding]:
    if not tools:
        return []
    found: list[RawFinding] = []
    for index, call, _ in calls_with_results(traj):
        problems = call_problems(call, tools)
        if problems:
            found.append(("schema_violation", index, f"{call.name}: {'; '.join(problems[:3])}"))
    return found


def _policy_violations(traj: Trajectory) -> list[RawFinding]:
    found: list[RawFinding] = []
    for detect in (unauthenticated_write, unconfirmed_write):
        hit = detect(traj)
        if hit is not None and hit.step is not None:
            found.append(("policy_violation", hit.step, hit.explanation))
    return found


def _repeats(traj: Trajectory) -> list[RawFinding]:
    found: list[RawFinding] = []
    seen_calls: dict[str, int] = {}
    seen_texts: dict[str, int] = {}
    for index, call, _ in calls_with_results(traj):
        key = f"{call.name}:{canonical_arguments(call.arguments)}"
        if key in seen_calls:
            found.append(
                ("repeated_action", index, f"{call.name} repeats message {seen_calls[key]}")
            )
        seen_calls.setdefault(key, index)
    for i, message in enumerate(traj.messages):
        text = message.text().strip()
        if message.role == "system" or _is_result(message) or len(text) < 20:
            continue
        if text in seen_texts:
            found.append(
                ("repeated_action", i, f"repeats message {seen_texts[text]} word for word")
            )
        seen_texts.setdefault(text, i)
    return found


def _unsupported_final(traj: Trajectory) -> list[RawFinding]:
    succeeded = False
    for i, message in enumerate(traj.messages):
        if _is_result(message):
            succeeded = succeeded or not is_error_text(message.text())
        elif i > 0 and _FINAL.search(message.text()) and not succeeded:
            why = "gives a final answer before any tool or code result succeeded"
            return [("unsupported_final_answer", i, why)]
    return []


def _fabrication(traj: Trajectory) -> list[RawFinding]:
    found: list[RawFinding] = []
    for i, message in enumerate(traj.messages):
        match = _FABRICATED.search(message.text()) if i > 0 and not _is_result(message) else None
        if match and message.role != "system":
            found.append(("fabrication_marker", i, f"mentions '{match.group(0)}'"))
    return found


def validation_log(traj: Trajectory, tools: list[dict] | None = None) -> list[Finding]:
    """Every finding, in message order, numbered E1, E2, ..."""
    raw = [
        *_tool_errors(traj),
        *_contradicted_claims(traj),
        *_schema_violations(traj, tools or []),
        *_policy_violations(traj),
        *_repeats(traj),
        *_unsupported_final(traj),
        *_fabrication(traj),
    ]
    raw.sort(key=lambda item: (item[1], item[0]))
    return [
        Finding(id=f"E{n}", kind=kind, message_index=index, text=text)
        for n, (kind, index, text) in enumerate(raw, start=1)
    ]


def render(findings: list[Finding], upto: int | None = None) -> str:
    """The log as the judge reads it (findings about messages before `upto`)."""
    shown = [f for f in findings if upto is None or f.message_index < upto]
    if not shown:
        return "(no findings: nothing in the run could be checked as wrong without a model)"
    return "\n".join(f"[{f.id}] message {f.message_index}, {f.kind}: {f.text}" for f in shown)

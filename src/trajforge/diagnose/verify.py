"""Stage 4, verification against recorded evidence (runs without an environment).

A diagnosis passes when the decisive step is an agent message of the run, every cited message
exists and contains its quoted excerpt, and the correction is a tool call that is valid
against the tool's schema. A free-text correction cannot be checked this way: it is recorded
as unverified ("unverifiable"), never as passed. Forkable runs are verified by replay instead
(`trajforge.diagnose.counterfactual`).
"""

from __future__ import annotations

from typing import Any

from trajforge.diagnose.model import Diagnosis, Verification
from trajforge.diagnose.schema_check import call_problems
from trajforge.schema import Message, Trajectory

UNVERIFIABLE = "unverifiable"


def searchable_text(message: Message) -> str:
    """The message text plus its tool calls' names and arguments."""
    calls = " ".join(f"{c.name} {c.arguments}" for c in message.tool_calls or [])
    return f"{message.text()} {calls}"


def evidence_problems(traj: Trajectory, diagnosis: Diagnosis) -> list[str]:
    """Why the diagnosis's step or cited evidence does not match the run."""
    problems: list[str] = []
    size = len(traj.messages)
    if diagnosis.step is None or not 0 <= diagnosis.step < size:
        return [f"step {diagnosis.step} is not a message index of this run (0..{size - 1})"]
    if traj.messages[diagnosis.step].role in ("tool", "system"):
        problems.append(
            f"message {diagnosis.step} is a {traj.messages[diagnosis.step].role} "
            "message, not an agent step"
        )
    for item in diagnosis.evidence:
        if not 0 <= item.message_index < size:
            problems.append(f"cited message {item.message_index} does not exist")
        elif item.quote and _squash(item.quote) not in _squash(
            searchable_text(traj.messages[item.message_index])
        ):
            problems.append(f"message {item.message_index} does not contain '{item.quote}'")
    return problems


def _squash(text: str) -> str:
    return " ".join(text.replace("…", " ").split()).lower()


def verify_by_evidence(
    traj: Trajectory, diagnosis: Diagnosis, tools: list[dict[str, Any]]
) -> Verification:
    """Check cited evidence and the corrected call's schema; see the module docstring."""
    problems = evidence_problems(traj, diagnosis)
    if problems:
        return Verification(method="evidence", verified=False, detail="; ".join(problems))
    correction = diagnosis.correction
    if correction is None or correction.tool_call is None:
        return Verification(
            method="evidence",
            verified=False,
            detail=f"{UNVERIFIABLE}: the correction is free text; evidence checked, but there "
            "is no call to check against a tool schema",
        )
    if not tools:
        return Verification(
            method="evidence",
            verified=False,
            detail=f"{UNVERIFIABLE}: no tool schemas known for this run",
        )
    call_issues = call_problems(correction.tool_call, tools)
    if call_issues:
        return Verification(method="evidence", verified=False, detail="; ".join(call_issues))
    return Verification(
        method="evidence",
        verified=True,
        detail=f"cited evidence found; {correction.tool_call.name} call valid against its schema",
    )

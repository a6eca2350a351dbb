"""Evidence detectors for multi-agent conversation logs (Who&When / AutoGen style).

In these logs several named agents talk in turn and a terminal agent (`Computer_terminal`)
prints the results of the code they write. Failures mostly start early: an agent fabricates
data it could not obtain, or the first substantive contribution takes a wrong path that the
others then verify and agree with. The detectors, in order:

1. fabricated data: the earliest agent message (after the opening one) that works with
   hypothetical, assumed, sample or simulated data -> hallucination;
2. code in the opening message: the first agent runs code straight from the previous
   attempt's results -> wrong plan at message 0;
3. otherwise the first substantive contribution after the opening message (plan
   announcements without code and browser page dumps are passed over): code whose
   execution fails (tool misuse), a final answer with nothing executed (unverified answer,
   premature termination), code on a wrong path (wrong plan) or unsupported claims
   (hallucination).

Two more detectors — a failed execution the next agent ignores, a final answer asserted
before any execution succeeded — are recorded beside the decisive error (`other_findings`)
and cited as evidence; on Who&When they point past the labelled step, so they do not decide.
"""

from __future__ import annotations

import re
from typing import Any

from trajforge.diagnose.evidence import excerpt, is_error_text, speaker
from trajforge.diagnose.model import Correction, Diagnosis, Evidence
from trajforge.diagnose.taxonomy import Category
from trajforge.schema import Message, Trajectory

TERMINAL_NAMES = {"computer_terminal", "terminal", "executor", "code_executor"}
_FABRICATED = re.compile(
    r"hypothetical|sample data|assum|mock|dummy|placeholder|simulat|for demonstration|"
    r"example data",
    re.IGNORECASE,
)
_PLAN_ONLY = re.compile(
    r"^\s*(sure|great|ok(ay)?|alright)?[,!.]?\s*(let'?s|let us|i will|i'll|we (will|need)|"
    r"first,|before|to (solve|begin|start|proceed|address|validate|verify))",
    re.IGNORECASE,
)
_FINAL = re.compile(r"TERMINATE|final answer|the answer is", re.IGNORECASE)


def is_terminal(message: Message) -> bool:
    """A message printed by the code-execution agent (or a tool)."""
    return message.role == "tool" or (message.name or "").lower() in TERMINAL_NAMES


def has_code(message: Message) -> bool:
    return "```" in message.text() and not is_terminal(message)


def _agent_steps(traj: Trajectory) -> list[int]:
    return [i for i, m in enumerate(traj.messages) if m.role != "system" and not is_terminal(m)]


def _diagnosis(
    traj: Trajectory, step: int, category: Category, explanation: str, **kw: Any
) -> Diagnosis:
    message = traj.messages[step]
    quote = excerpt(message.text(), 50)
    evidence = [Evidence(message_index=step, quote=quote, note="the decisive message")]
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=step,
        agent=speaker(message),
        category=category,
        explanation=explanation,
        evidence=evidence + kw.pop("evidence", []),
        correction=Correction(message=kw.pop("fix"), source="heuristic"),
        **kw,
    )


def fabricated_data(traj: Trajectory) -> Diagnosis | None:
    for index in _agent_steps(traj):
        match = _FABRICATED.search(traj.messages[index].text()) if index > 0 else None
        if match:
            return _diagnosis(
                traj,
                index,
                "hallucination",
                f"{speaker(traj.messages[index])} works with made-up data at message {index} "
                f"('{match.group(0)}') instead of obtaining the real data",
                fix="Obtain the real data (download, search or read the file) instead of "
                "assuming or simulating it; say so if it cannot be obtained.",
                details={"detector": "fabricated-data"},
            )
    return None


def code_in_opening(traj: Trajectory) -> Diagnosis | None:
    if not traj.messages or not has_code(traj.messages[0]) or is_terminal(traj.messages[0]):
        return None
    return _diagnosis(
        traj,
        0,
        "wrong_plan",
        f"{speaker(traj.messages[0])} runs code carried over from the previous attempt at "
        "message 0 without checking that its approach fits the task",
        fix="Re-read the task and check that the carried-over approach fits it before running "
        "any code.",
        details={"detector": "code-in-opening"},
    )


def is_substantive(message: Message) -> bool:
    """A message that claims or does something: not a plan announcement without code, not a
    page dump of a browsing agent."""
    text = message.text()
    if text.lstrip().startswith("Address:"):
        return False
    return has_code(message) or not _PLAN_ONLY.search(text)


def first_contribution(traj: Trajectory) -> Diagnosis | None:
    steps = [i for i in _agent_steps(traj) if i > 0] or _agent_steps(traj)
    if not steps:
        return None
    index = next((i for i in steps if is_substantive(traj.messages[i])), steps[0])
    category, why, cited = _classify_contribution(traj, index)
    return _diagnosis(
        traj,
        index,
        category,
        f"{speaker(traj.messages[index])} makes the first substantive contribution at message "
        f"{index} and {why}; the later agents build on it",
        evidence=cited,
        fix="Verify each intermediate result against a real source or an executed check "
        "before building on it or reporting an answer.",
        details={"detector": "first-contribution"},
    )


def _classify_contribution(traj: Trajectory, index: int) -> tuple[Category, str, list[Evidence]]:
    message = traj.messages[index]
    nxt = index + 1
    if has_code(message) and nxt < len(traj.messages) and is_terminal(traj.messages[nxt]):
        output = traj.messages[nxt].text()
        if is_error_text(output):
            cited = [Evidence(message_index=nxt, quote=excerpt(output, 40), note="fails")]
            return "tool_misuse", f"its code fails when run (message {nxt})", cited
    if has_code(message):
        return "wrong_plan", "its code takes an approach that cannot give the answer", []
    executed = any(is_terminal(m) for m in traj.messages[1:index])
    if _FINAL.search(message.text()) and not executed:
        return "premature_termination", "asserts a final answer with nothing executed", []
    return "hallucination", "states results that no executed step supports", []


_ACKNOWLEDGES = re.compile(
    r"error|fail|issue|problem|fix|correct|again|instead|traceback|exception", re.IGNORECASE
)


def ignored_execution_failure(traj: Trajectory) -> Diagnosis | None:
    """A failed code execution that the next agent message does not take up."""
    for index, message in enumerate(traj.messages):
        if not (is_terminal(message) and is_error_text(message.text())):
            continue
        reply = next((i for i in _agent_steps(traj) if i > index), None)
        if reply is not None and not _ACKNOWLEDGES.search(traj.messages[reply].text()):
            return _diagnosis(
                traj,
                reply,
                "misread_tool_output",
                f"the code execution at message {index} failed and message {reply} goes on "
                "without taking it up",
                evidence=[Evidence(message_index=index, note="the failed execution")],
                fix="Read the failed execution, fix the code and run it again before going on.",
                details={"detector": "ignored-execution-failure"},
            )
    return None


def unverified_final_answer(traj: Trajectory) -> Diagnosis | None:
    """A final answer asserted before any code execution succeeded."""
    succeeded = False
    for index, message in enumerate(traj.messages):
        if is_terminal(message):
            succeeded = succeeded or not is_error_text(message.text())
        elif index > 0 and _FINAL.search(message.text()) and not succeeded:
            return _diagnosis(
                traj,
                index,
                "premature_termination",
                f"{speaker(message)} asserts a final answer at message {index} although no "
                "execution had succeeded to verify it",
                fix="Verify the answer with an executed check or a cited source before "
                "declaring it final.",
                details={"detector": "unverified-final-answer"},
            )
    return None


PRIMARY = (fabricated_data, code_in_opening, first_contribution)
"""Detectors that localize, in priority order (measured best on Who&When)."""
SECONDARY = (ignored_execution_failure, unverified_final_answer)
"""Detectors whose findings are recorded beside the decisive error, never instead of it:
on Who&When they point at later messages than the labelled decisive ones."""


def localize_multi_agent(traj: Trajectory) -> Diagnosis | None:
    """The first primary finding, with the secondary findings recorded and cited."""
    primary = next((found for detect in PRIMARY if (found := detect(traj)) is not None), None)
    if primary is None:
        return None
    for detect in SECONDARY:
        found = detect(traj)
        if found is not None and found.step != primary.step:
            primary.details.setdefault("other_findings", []).append(
                {"step": found.step, "category": found.category, "why": found.explanation}
            )
            primary.evidence.append(
                Evidence(message_index=found.step or 0, note=f"later: {found.explanation}")
            )
    return primary

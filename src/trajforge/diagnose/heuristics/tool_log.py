"""Evidence detectors for single-agent tool-calling logs with no gold solution.

Each detector returns the earliest message where its evidence shows a mistake, as a
diagnosis, or None. `localize_tool_log` takes the earliest finding of all detectors; with no
evidence at all the failure is put on the agent's last message (it ended without success).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from trajforge.diagnose.evidence import (
    calls_with_results,
    canonical_arguments,
    excerpt,
    is_error_text,
    is_write,
)
from trajforge.diagnose.heuristics.gold import AUTH_ENVS, AUTH_TOOLS, TAU_ENVS
from trajforge.diagnose.model import Correction, Diagnosis, Evidence
from trajforge.diagnose.taxonomy import Category
from trajforge.schema import Trajectory

_ACKNOWLEDGES = re.compile(
    r"error|sorry|unable|issue|problem|fail|couldn't|could not|cannot|can't|apolog|retry|"
    r"again|instead|not (found|valid|available)",
    re.IGNORECASE,
)
_AFFIRMS = re.compile(r"\b(yes|yeah|yep|confirm|proceed|go ahead|sure|please do|correct)\b", re.I)
LOOP_REPEATS = 3


def _finding(
    traj: Trajectory, step: int, category: Category, explanation: str, **kw: Any
) -> Diagnosis:
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=step,
        agent=traj.messages[step].name or traj.messages[step].role,
        category=category,
        explanation=explanation,
        **kw,
    )


def unauthenticated_write(traj: Trajectory) -> Diagnosis | None:
    """tau retail policy: a write before the user was identified."""
    if traj.task.environment not in AUTH_ENVS:
        return None
    for index, call, _ in calls_with_results(traj):
        if call.name in AUTH_TOOLS:
            return None
        if is_write(call.name) and call.name != "transfer_to_human_agents":
            return _finding(
                traj,
                index,
                "policy_violation",
                f"message {index} calls {call.name} before authenticating the user "
                f"(no {' / '.join(AUTH_TOOLS)} call before it)",
                evidence=[Evidence(message_index=index, quote=call.name, note="unauthorized")],
                correction=Correction(
                    message="Before changing anything, authenticate the user: ask for their "
                    "email, or name and zip code, and look up their user id.",
                    source="heuristic",
                ),
                details={"detector": "unauthenticated-write"},
            )
    return None


def unconfirmed_write(traj: Trajectory) -> Diagnosis | None:
    """tau policy: a write the user did not explicitly confirm in their last message."""
    if traj.task.environment not in TAU_ENVS:
        return None
    for index, call, _ in calls_with_results(traj):
        if not is_write(call.name) or call.name == "transfer_to_human_agents":
            continue
        last_user = next(
            (i for i in range(index - 1, -1, -1) if traj.messages[i].role == "user"), None
        )
        if last_user is None or not _AFFIRMS.search(traj.messages[last_user].text()):
            cited = [Evidence(message_index=index, quote=call.name, note="unconfirmed write")]
            return _finding(
                traj,
                index,
                "policy_violation",
                f"message {index} calls {call.name} without an explicit 'yes' from the user "
                f"in the last user message ({last_user})",
                evidence=cited,
                correction=Correction(
                    message="List the action's details and ask the user to confirm (yes) "
                    "before making the change.",
                    source="heuristic",
                ),
                details={"detector": "unconfirmed-write"},
            )
    return None


def ignored_tool_error(traj: Trajectory) -> Diagnosis | None:
    """A tool error followed by an agent text message that does not acknowledge it."""
    for _, call, result in calls_with_results(traj):
        if result is None or not is_error_text(traj.messages[result].text()):
            continue
        following = next(
            (i for i in range(result + 1, len(traj.messages)) if traj.messages[i].role != "tool"),
            None,
        )
        if following is None or traj.messages[following].role != "assistant":
            continue
        reply = traj.messages[following]
        if reply.tool_calls or _ACKNOWLEDGES.search(reply.text()):
            continue
        error = excerpt(traj.messages[result].text(), 80)
        return _finding(
            traj,
            following,
            "misread_tool_output",
            f"message {result} reports an error from {call.name} ({error}), and message "
            f"{following} goes on as if the call had worked",
            evidence=[
                Evidence(message_index=result, quote=error[:40], note="the tool error"),
                Evidence(message_index=following, note="ignores it"),
            ],
            correction=Correction(
                message=f"Tell the user that {call.name} failed ({error}) and fix the call.",
                source="heuristic",
            ),
            details={"detector": "ignored-tool-error"},
        )
    return None


def repeated_calls(traj: Trajectory) -> Diagnosis | None:
    """The same call (name and arguments) made LOOP_REPEATS times: looping."""
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    for index, call, _ in calls_with_results(traj):
        key = f"{call.name}:{canonical_arguments(call.arguments)}"
        seen[key] += 1
        first.setdefault(key, index)
        if seen[key] == LOOP_REPEATS:
            return _finding(
                traj,
                index,
                "looping",
                f"{call.name} is called with the same arguments {LOOP_REPEATS} times "
                f"(first at message {first[key]}, again at {index}) without progress",
                evidence=[
                    Evidence(message_index=first[key], quote=call.name, note="first call"),
                    Evidence(message_index=index, quote=call.name, note="repeat"),
                ],
                correction=Correction(
                    message="Stop repeating the call; use its earlier result or change the "
                    "arguments.",
                    source="heuristic",
                ),
                details={"detector": "repeated-calls"},
            )
    return None


_BASH_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)


def repeated_text_commands(traj: Trajectory) -> Diagnosis | None:
    """Harnesses whose actions are shell blocks in the text (mini-swe-agent): the same
    command giving the same output LOOP_REPEATS times is looping."""
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    for index, message in enumerate(traj.messages):
        block = _BASH_BLOCK.search(message.text()) if message.role == "assistant" else None
        if block is None or message.tool_calls:
            continue
        output = traj.messages[index + 1].text() if index + 1 < len(traj.messages) else ""
        command = " ".join(block.group(1).split())
        key = f"{command}\n{output}"
        seen[key] += 1
        first.setdefault(key, index)
        if seen[key] == LOOP_REPEATS:
            quote = excerpt(command, 40)
            return _finding(
                traj,
                index,
                "looping",
                f"the command `{excerpt(command, 80)}` runs {LOOP_REPEATS} times with the same "
                f"output (first at message {first[key]}, again at {index}): no progress",
                evidence=[
                    Evidence(message_index=first[key], quote=quote, note="first run"),
                    Evidence(message_index=index, quote=quote, note="repeat"),
                ],
                correction=Correction(
                    message="Stop re-running the command; read its earlier output and change "
                    "the approach.",
                    source="heuristic",
                ),
                details={"detector": "repeated-text-commands"},
            )
    return None


def last_step(traj: Trajectory) -> Diagnosis | None:
    """No other evidence: the agent ended the failed run at its last message."""
    steps = traj.assistant_indices()
    if not steps:
        return None
    last = steps[-1]
    return _finding(
        traj,
        last,
        "premature_termination",
        f"the run failed and no earlier evidence points at a mistake; the agent ended at "
        f"message {last} without completing the task",
        evidence=[
            Evidence(message_index=last, quote=excerpt(traj.messages[last].text(), 40)),
        ],
        correction=Correction(
            message="Do not end yet: check which of the user's requests are still open and "
            "complete them.",
            source="heuristic",
        ),
        omission=True,
        details={"detector": "last-step"},
    )


DETECTORS: list[Callable[[Trajectory], Diagnosis | None]] = [
    unauthenticated_write,
    unconfirmed_write,
    ignored_tool_error,
    repeated_calls,
    repeated_text_commands,
]


def localize_tool_log(traj: Trajectory) -> Diagnosis | None:
    """The earliest finding of the detectors, else the last step."""
    findings = [found for detect in DETECTORS if (found := detect(traj)) is not None]
    if findings:
        return min(findings, key=lambda d: d.step if d.step is not None else 1 << 30)
    return last_step(traj)

"""The first deviation from the oracle, beside the point of no return (forkable runs).

The counterfactual method finds the **point of no return**: the last agent message from
which the expert, forked there, still succeeds (after it, it cannot). A run often went wrong
earlier, in a way the expert could still have repaired later: the **first deviation** is the
first agent message, at or before the point of no return, where the privileged expert would
have acted otherwise and the difference matters. The oracle sees it in one of two ways:

- `distance_increased`: the oracle distance (fewest actions to success) is larger after the
  agent's message than before it, or success became unreachable: a wrong write, a detour;
- `wrong_statement`: a message to the user states a number where the task requires an answer
  (`RequiredOutputs`) that the run never states: same kind of number (same count of
  decimals, within a factor of 10), a value that is none of the task's answers, and not read
  from an earlier message (a number quoted from a tool result or the user is not a claim);
  of several such numbers, the one closest to the answer. The oracle
  distance cannot see this: it counts an answer as missing until it is stated, and a wrong
  answer leaves it missing. Numbers quoted
  from the wrong record (a tracking number of another order) are not caught.

Otherwise the first deviation is the point of no return itself (`no_return`).

Whether the change alone repairs the run is then tried by a fork: the correction is sent in
place of the message and the run's own later turns are replayed (the recorded user replies,
the agent's recorded messages with their tool calls re-executed); `repaired` is that fork's
outcome.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.replay import ParentScript, ReplayPolicy, ReplayUser
from trajforge.diagnose.model import Correction, Deviation, Diagnosis
from trajforge.envs.base import Environment, Oracle, RequiredOutputs
from trajforge.envs.replay import replay_to
from trajforge.rollout.episode import Limits
from trajforge.rollout.fork import ForkOptions, fork
from trajforge.schema import Message, Trajectory

LIST_MARKER = re.compile(r"^\s*\d+\.\s", re.MULTILINE)
NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,]*\d)?(?:\.\d+)?(?!\w)")


def _number_spans(text: str) -> list[tuple[re.Match, str]]:
    """(match, value with commas dropped) per number of `text`, list markers left out."""
    markers = {m.end() for m in LIST_MARKER.finditer(text)}
    found = []
    for match in NUMBER.finditer(text):
        if not any(match.start() < end <= match.end() + 2 for end in markers):
            found.append((match, match.group().replace(",", "")))
    return found


def numbers_in(text: str) -> list[str]:
    """The numbers a text states, commas dropped (list markers such as `1. ` left out)."""
    return [value for _, value in _number_spans(text)]


def _decimals(number: str) -> int:
    return len(number.split(".", 1)[1]) if "." in number else 0


MAGNITUDE = 10.0
"""A stated number counts as an answer in the required one's place within this factor."""


def _near(stated: str, required: str) -> bool:
    a, b = float(stated), float(required)
    return a > 0 and b > 0 and 1 / MAGNITUDE <= a / b <= MAGNITUDE


def _is_number(text: str) -> bool:
    return re.fullmatch(r"\d+(?:\.\d+)?", text.replace(",", "")) is not None


class CorrectedReplay:
    """Sends the correction, then the parent's own later turns (`ReplayPolicy`)."""

    name = "corrected-replay"

    def __init__(self, correction: Message, replay: ReplayPolicy) -> None:
        self.correction: Message | None = correction
        self.replay = replay

    def act(self, state: EpisodeState) -> PolicyStep:
        if self.correction is not None:
            message, self.correction = self.correction, None
            return PolicyStep(message=message)
        return self.replay.act(state)


def repair_by_replay(
    env: Environment, traj: Trajectory, index: int, correction: Correction
) -> tuple[bool, str]:
    """Fork before message `index`, send `correction`, replay the run's later turns."""
    script = ParentScript(traj, index + 1)
    policy = CorrectedReplay(correction.as_message(), ReplayPolicy(traj, index + 1, script))
    limits = Limits(max_steps=len(traj.assistant_indices()) + 1)
    options = ForkOptions(limits=limits, harness="trajforge-repair")
    child = fork(traj, index, policy, user=ReplayUser(script), env=env, options=options)
    outcome = child.outcome
    verdict = "success" if outcome.success else "failure"
    return bool(outcome.success), (
        f"fork at message {index} with the correction, the run's own later turns replayed: "
        f"{verdict} (reward {outcome.reward}, ended: {outcome.termination_reason})"
    )


def distance_at(env: Environment, traj: Trajectory, cut: int) -> int | None:
    """The oracle distance in the state after the first `cut` messages."""
    replay_to(env, traj, cut)
    env.bind_conversation(list(traj.messages[:cut]))
    return env.distance() if isinstance(env, Oracle) else None


class Answers(NamedTuple):
    """The task's required numeric answers, and those the whole run never states."""

    required: frozenset[float]
    unsaid: list[str]


def numeric_answers(env: Environment, traj: Trajectory) -> Answers:
    """See `Answers` (empty for an environment without required outputs)."""
    if not isinstance(env, RequiredOutputs):
        return Answers(frozenset(), [])
    replay_to(env, traj, len(traj.messages))
    env.bind_conversation(list(traj.messages))
    given = {o: ok for o, ok in env.outputs_given().items() if _is_number(o)}
    required = frozenset(float(o.replace(",", "")) for o in given)
    return Answers(required, [o.replace(",", "") for o, ok in given.items() if not ok])


def wrong_number(traj: Trajectory, index: int, answers: Answers) -> tuple[str, str] | None:
    """(stated, required): the number message `index` claims where an answer is required
    (of several, the one closest to it)."""
    message = traj.messages[index]
    if message.tool_calls or not message.text() or not answers.unsaid:
        return None
    quoted = {n for m in traj.messages[:index] for n in numbers_in(m.text())}
    claims = [n for n in numbers_in(message.text()) if n not in quoted]
    candidates = [
        (abs(math.log(float(stated) / float(required))), stated, required)
        for stated in claims
        if float(stated) not in answers.required
        for required in answers.unsaid
        if _decimals(stated) == _decimals(required) and _near(stated, required)
    ]
    if not candidates:
        return None
    _, stated, required = min(candidates)
    return stated, required


def corrected_statement(message: Message, stated: str, required: str) -> Correction:
    """The message with its first `stated` number (as written) replaced by `required`."""
    text = message.text()
    match = next(m for m, value in _number_spans(text) if value == stated)
    return Correction(
        message=text[: match.start()] + required + text[match.end() :], source="oracle"
    )


def _increase(before: int | None, after: int | None) -> bool:
    if before is None:
        return False
    return after is None or after > before


def _find(env: Environment, traj: Trajectory, until: int) -> Deviation | None:
    """The first distance increase or wrong statement among agent messages up to `until`."""
    from trajforge.diagnose.counterfactual import correction_from, cut_after, expert_action_before

    answers = numeric_answers(env, traj)
    for index in (i for i in traj.assistant_indices() if i <= until):
        wrong = wrong_number(traj, index, answers)
        if wrong is not None:
            stated, required = wrong
            return Deviation(
                message_index=index,
                reason="wrong_statement",
                detail=f"states {stated} where the task's answer is {required}, which the run "
                "never states",
                correction=corrected_statement(traj.messages[index], stated, required),
            )
        before = distance_at(env, traj, index)
        after = distance_at(env, traj, cut_after(traj, index))
        if _increase(before, after):
            return Deviation(
                message_index=index,
                reason="distance_increased",
                detail=f"oracle distance {before} before the message, "
                f"{'unreachable' if after is None else after} after it",
                correction=correction_from(expert_action_before(env, traj, index)),
            )
    return None


def first_deviation(env: Environment, traj: Trajectory, decisive: Diagnosis) -> Deviation | None:
    """See module docstring; None when the diagnosis has no point of no return."""
    if decisive.step is None:
        return None
    found = _find(env, traj, decisive.step) or Deviation(
        message_index=decisive.step,
        reason="no_return",
        detail="no earlier message raises the oracle distance or states a wrong answer",
        correction=decisive.correction,
    )
    if found.correction is not None:
        found.repaired, found.repair_detail = repair_by_replay(
            env, traj, found.message_index, found.correction
        )
    return found

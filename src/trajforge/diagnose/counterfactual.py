"""Counterfactual localization on forkable runs, and continuation by the expert.

V(t) is whether the expert, continuing from the state after agent message t (the message
and the tool results that answer it), still succeeds (within the run's own step budget when
the run ended by hitting its step limit). The decisive error is the first agent
message after which V is false. When V never drops, the error is the agent's omission at its
last message: it ended (or handed off) while the expert could still have finished. When V is
already false before the agent's first message, the expert cannot solve the task from the
start and nothing is blamed on the agent.

The correction is the oracle's `expert_action()` in the state before the decisive message.
The decisive message is the point of no return: forked there (keeping the messages before
it) the expert still succeeds, not after it. The first deviation, often earlier, is found
by `trajforge.diagnose.deviation`.
"""

from __future__ import annotations

from typing import Any

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.evidence import excerpt, is_write
from trajforge.diagnose.heuristics.gold import (
    classify_wrong_write,
    localize_by_gold,
    support_for,
)
from trajforge.diagnose.model import Correction, Diagnosis, Evidence
from trajforge.diagnose.taxonomy import Category
from trajforge.envs import make_env
from trajforge.envs.base import Environment, Oracle, TextActions
from trajforge.envs.replay import replay_to
from trajforge.errors import UserError
from trajforge.rollout.episode import Limits
from trajforge.rollout.fork import ForkOptions, fork
from trajforge.schema import Message, ToolCall, Trajectory

EXTRA_STEPS = 30
"""Agent steps the expert may add after the prefix."""


class CorrectedExpert:
    """Sends the correction as its first message, then acts as the expert."""

    name = "corrected-expert"

    def __init__(self, correction: Message) -> None:
        self.correction: Message | None = correction
        self.expert = ExpertPolicy()

    def act(self, state: EpisodeState) -> PolicyStep:
        if self.correction is not None:
            message, self.correction = self.correction, None
            return PolicyStep(message=message)
        return self.expert.act(state)


def cut_after(traj: Trajectory, index: int) -> int:
    """The prefix length holding message `index` and the tool results right after it."""
    cut = index + 1
    while cut < len(traj.messages) and traj.messages[cut].role == "tool":
        cut += 1
    return cut


def continue_from(
    env: Environment, traj: Trajectory, cut: int, first: Message | None = None
) -> Trajectory:
    """Fork after the first `cut` messages of `traj` (state rebuilt by replay) and let the
    expert finish, after sending `first` when given; the scripted user plays the customer.
    Returns the fork (not stored)."""
    policy = CorrectedExpert(first) if first is not None else ExpertPolicy()
    options = ForkOptions(limits=step_budget(traj, cut), harness="trajforge-counterfactual")
    return fork(traj, cut, policy, user=ScriptedUser(), env=env, options=options)


def step_budget(traj: Trajectory, cut: int) -> Limits:
    """The expert's step limit: the run's own budget when the run was cut off by its step
    limit (the expert must finish within the steps the agent had), else EXTRA_STEPS more."""
    if traj.outcome.termination_reason == "max_steps":
        return Limits(max_steps=len(traj.assistant_indices()))
    steps = len([i for i in range(cut) if traj.messages[i].role == "assistant"]) + EXTRA_STEPS
    return Limits(max_steps=steps)


def expert_succeeds(env: Environment, traj: Trajectory, cut: int) -> bool:
    """V at prefix length `cut`."""
    return bool(continue_from(env, traj, cut).outcome.success)


def expert_action_before(env: Environment, traj: Trajectory, index: int) -> Message | None:
    """The oracle's action in the state before message `index`, as an assistant message."""
    replay_to(env, traj, index)
    env.bind_conversation(list(traj.messages[:index]))
    action = env.expert_action() if isinstance(env, Oracle) else None
    if isinstance(action, ToolCall):
        call = action.model_copy(update={"id": f"correction_{index}"})
        return Message(role="assistant", tool_calls=[call])
    return action


def check_forkable(traj: Trajectory) -> Environment:
    """A fresh environment for the run, or a UserError saying why it cannot be forked."""
    try:
        env = make_env(traj)
    except UserError as exc:
        raise UserError(
            f"{exc}; the counterfactual method needs a forkable run (use --method heuristic)"
        ) from None
    if not isinstance(env, Oracle):
        raise UserError(
            f"trajectory {traj.id}: environment '{env.name}' has no oracle; the "
            "counterfactual method needs one (use --method heuristic)"
        )
    if isinstance(env, TextActions):  # corrections here are tool calls, forks cheap
        raise UserError(
            f"trajectory {traj.id}: environment '{env.name}' reads actions from text; the "
            "counterfactual method forks runs of tool calls (use --method heuristic)"
        )
    return env


class CounterfactualLocalizer:
    """Localize by forking at every agent step and letting the expert finish."""

    name = "counterfactual"

    def check(self, traj: Trajectory) -> None:
        check_forkable(traj)

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        env = check_forkable(traj)
        steps = traj.assistant_indices()
        if not steps:
            return None
        values: dict[int, bool] = {}
        if not expert_succeeds(env, traj, steps[0]):
            return _unsolvable(traj, steps[0])
        found = None
        for index in steps:
            values[index] = expert_succeeds(env, traj, cut_after(traj, index))
            if not values[index]:
                found = _decisive(env, traj, index, values)
                break
        found = found or _omission(env, traj, steps[-1], values)
        return with_deviation(env, traj, found)


def with_deviation(env: Environment, traj: Trajectory, decisive: Diagnosis) -> Diagnosis:
    """The diagnosis with its point of no return and first deviation set."""
    from trajforge.diagnose.deviation import first_deviation

    decisive.point_of_no_return = decisive.step
    decisive.first_deviation = first_deviation(env, traj, decisive)
    return decisive


def _v_details(values: dict[int, bool]) -> dict[str, Any]:
    return {"V": {str(k): v for k, v in values.items()}, "detector": "counterfactual"}


def _unsolvable(traj: Trajectory, first: int) -> Diagnosis:
    return Diagnosis(
        trajectory_id=traj.id,
        method="counterfactual",
        step=None,
        category=None,
        explanation=f"the expert fails from the state before the agent's first message "
        f"({first}): the failure is not the agent's",
        details={"V_start": False, "detector": "counterfactual"},
    )


def _decisive(env: Environment, traj: Trajectory, index: int, values: dict[int, bool]) -> Diagnosis:
    message = traj.messages[index]
    correction = expert_action_before(env, traj, index)
    category, why, evidence = explain_step(traj, index, as_action(correction))
    return Diagnosis(
        trajectory_id=traj.id,
        method="counterfactual",
        step=index,
        confidence=1.0,
        agent=message.name or "assistant",
        category=category,
        explanation=f"{why}. The expert succeeds from every earlier agent step but not from "
        f"the state after message {index}",
        evidence=evidence,
        correction=correction_from(correction),
        details=_v_details(values),
    )


def explain_step(
    traj: Trajectory, index: int, intended: dict | None
) -> tuple[Category | None, str, list]:
    """Category, explanation and evidence for the decisive message: the gold-action reading
    of the same step when the run records gold actions, else a comparison with the expert's
    action in that state."""
    by_gold = localize_by_gold(traj)
    if by_gold is not None and by_gold.step == index and not by_gold.omission:
        return by_gold.category, by_gold.explanation, by_gold.evidence
    message = traj.messages[index]
    evidence = [Evidence(message_index=index, quote=_quote(message), note="after this, V=false")]
    calls = [c for c in message.tool_calls or [] if is_write(c.name)] or (message.tool_calls or [])
    if not calls:
        return "premature_termination", f"message {index} ends the agent's work", evidence
    same = [intended] if intended and intended["name"] == calls[0].name else []
    category, why = classify_wrong_write(traj, index, calls[0], intended, same)
    return category, why, evidence + support_for(traj, index, intended)


def _omission(env: Environment, traj: Trajectory, last: int, values: dict[int, bool]) -> Diagnosis:
    correction = expert_action_before(env, traj, last)
    return Diagnosis(
        trajectory_id=traj.id,
        method="counterfactual",
        step=last,
        confidence=1.0,
        agent=traj.messages[last].name or "assistant",
        category="premature_termination",
        explanation=f"the expert still succeeds after every agent message, so no action broke "
        f"the task: at message {last} the agent stopped with work left undone",
        evidence=[Evidence(message_index=last, quote=_quote(traj.messages[last]))],
        correction=correction_from(correction),
        omission=True,
        details=_v_details(values),
    )


def _quote(message: Message) -> str:
    if message.tool_calls:
        return message.tool_calls[0].name
    return excerpt(message.text(), 40)


def as_action(message: Message | None) -> dict | None:
    if message is None or not message.tool_calls:
        return None
    call = message.tool_calls[0]
    try:
        return {"name": call.name, "kwargs": call.parsed_arguments()}
    except ValueError:
        return None


def correction_from(message: Message | None) -> Correction | None:
    """The oracle's action as a correction."""
    if message is None:
        return None
    call = message.tool_calls[0] if message.tool_calls else None
    return Correction(tool_call=call, message=None if call else message.text(), source="oracle")

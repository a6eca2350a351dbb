"""Rebuild an environment's state at any message index of a recorded run.

A deterministic environment reaches the state after the first `n` messages of a
trajectory by re-executing the tool calls those messages answer. `replay_to` does that;
`replay_run` also compares every re-executed call with the recorded tool output and the
final judgement with the recorded reward (the replay fidelity report).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from trajforge.envs.base import (
    ComparesSubmission,
    Environment,
    Oracle,
    ServesTasks,
    StateHashing,
    TextActions,
)
from trajforge.envs.making import make_env
from trajforge.envs.registry import ENVIRONMENTS
from trajforge.errors import UserError
from trajforge.schema import Message, ToolCall, Trajectory


def answered_calls(messages: list[Message], n: int) -> list[tuple[int, ToolCall, Message]]:
    """(index of the tool message, call, tool message) for calls answered before index `n`."""
    calls: dict[str, ToolCall] = {}
    answered = []
    for index, message in enumerate(messages[:n]):
        for call in message.tool_calls or []:
            calls[call.id] = call
        if message.role == "tool" and message.tool_call_id in calls:
            answered.append((index, calls.pop(message.tool_call_id), message))
    return answered


def recorded_actions(
    env: Environment, messages: list[Message], n: int
) -> list[tuple[int, ToolCall, Message]]:
    """`answered_calls`, or for an environment of text actions (`TextActions`) the actions
    of assistant messages answered by the next message within the first `n`."""
    if not isinstance(env, TextActions):
        return answered_calls(messages, n)
    found = []
    for index, message in enumerate(messages[: n - 1]):
        call = env.text_action(message)
        if call is not None and messages[index + 1].role == "user":
            found.append((index + 1, call, messages[index + 1]))
    return found


def compared_forms(env: Environment, recorded: str, replayed: str) -> tuple[str, str]:
    """The two outputs as compared: normalized where the environment normalizes them."""
    if isinstance(env, TextActions):
        return env.comparable(recorded), env.comparable(replayed)
    return recorded, replayed


UNEXECUTED_FAULTS = frozenset({"transient", "persistent"})
"""Injected faults that stand in for the tool call: the tool never ran, so replay skips it.
A `silent` fault ran the tool and only altered what the agent saw: replay executes it."""


def fault_kinds(trajectory: Trajectory) -> dict[int, str]:
    """Kind of the recorded fault at each tool message index."""
    return {fault.message_index: fault.kind for fault in trajectory.faults}


def replay_to(env: Environment, trajectory: Trajectory, n: int) -> Any:
    """Reset `env` to the trajectory's task, re-execute the calls answered in the first `n`
    messages (not those an injected fault kept from running), and return `env.snapshot()`
    (the environment stays in that state)."""
    if not 0 <= n <= len(trajectory.messages):
        raise UserError(
            f"trajectory {trajectory.id}: message index {n} is outside "
            f"0..{len(trajectory.messages)}"
        )
    env.reset(trajectory.task)
    return replay_calls(env, trajectory, n)


def replay_calls(env: Environment, trajectory: Trajectory, n: int) -> Any:
    """`replay_to` without the reset: for an environment just reset to the run's task."""
    faults = fault_kinds(trajectory)
    for index, call, _ in recorded_actions(env, trajectory.messages, n):
        if faults.get(index) not in UNEXECUTED_FAULTS:
            env.step(call)
    return env.snapshot()


def state_at(trajectory: Trajectory, n: int) -> dict[str, Any]:
    """What the environment looks like after the first `n` messages: state hash, oracle
    distance and the changed records, when the environment offers them."""
    env = make_env(trajectory)
    replay_to(env, trajectory, n)
    env.bind_conversation(trajectory.messages[:n])
    report: dict[str, Any] = {"trajectory_id": trajectory.id, "at": n}
    if isinstance(env, StateHashing):
        report["state_hash"] = env.state_hash()
    if isinstance(env, Oracle):
        report["distance"] = env.distance()
    if isinstance(env, StateHashing):
        report["changed"] = env.changed_records()
    return report


class Mismatch(BaseModel):
    """One replayed call (or outcome) that differs from the recording."""

    trajectory_id: str
    message_index: int | None = Field(description="Tool message index (None: the outcome).")
    tool: str | None = None
    reason: str = Field(description="What differs, with the first differing text.")


class RunReplay(BaseModel):
    """Replay fidelity of one run."""

    trajectory_id: str
    environment: str | None = None
    calls: int = Field(description="Calls compared (calls carrying an injected fault excluded).")
    exact: int
    faulted: int = Field(default=0, description="Calls with an injected fault, not compared.")
    outcome_agree: bool
    final_state_agree: bool | None = Field(
        default=None, description="Final state equals the recorded submission (None: none)."
    )
    recorded_reward: float | None
    replayed_reward: float | None
    mismatches: list[Mismatch]


def replay_run(trajectory: Trajectory, env: Environment | None = None) -> RunReplay:
    """Re-execute every answered call of a run; compare outputs and the final judgement.

    Calls whose recorded result is an injected fault are not compared: unexecuted ones
    (transient, persistent) are skipped, silent ones are executed."""
    env = env or make_env(trajectory)
    env.reset(trajectory.task)
    env.bind_conversation(trajectory.messages)
    faults = fault_kinds(trajectory)
    mismatches = []
    compared = 0
    answered = recorded_actions(env, trajectory.messages, len(trajectory.messages))
    for index, call, recorded in answered:
        if faults.get(index) in UNEXECUTED_FAULTS:
            continue
        replayed = env.step(call).content
        if index in faults:
            continue
        compared += 1
        left, right = compared_forms(env, recorded.text(), replayed)
        if left != right:
            reason = describe_difference(left, right)
            mismatches.append(
                Mismatch(
                    trajectory_id=trajectory.id, message_index=index, tool=call.name, reason=reason
                )
            )
    final = (
        env.submission_matches(trajectory.task.data.get("submission"))
        if isinstance(env, ComparesSubmission)
        else None
    )
    outcome = env.evaluate()
    recorded_reward = trajectory.outcome.reward
    agree = recorded_reward is not None and outcome.reward == recorded_reward
    if not agree:
        mismatches.append(
            Mismatch(
                trajectory_id=trajectory.id,
                message_index=None,
                tool=None,
                reason=f"outcome: recorded reward {recorded_reward}, replayed {outcome.reward} "
                f"({outcome.details})",
            )
        )
    return RunReplay(
        trajectory_id=trajectory.id,
        environment=trajectory.task.environment,
        calls=compared,
        exact=compared - sum(m.message_index is not None for m in mismatches),
        faulted=len(answered) - compared,
        outcome_agree=agree,
        final_state_agree=final,
        recorded_reward=recorded_reward,
        replayed_reward=outcome.reward,
        mismatches=mismatches,
    )


def describe_difference(recorded: str, replayed: str, context: int = 60) -> str:
    """A one-line description of where two outputs first differ."""
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
        min(len(recorded), len(replayed)),
    )
    start = max(0, at - 20)
    return (
        f"output differs at char {at}: recorded '{recorded[start : at + context]}' "
        f"vs replayed '{replayed[start : at + context]}'"
    )


class ReplaySummary(BaseModel):
    """Replay fidelity over many runs (what `trajforge replay --json` prints)."""

    runs: int = Field(description="Runs replayed.")
    calls: int = Field(description="Tool calls re-executed.")
    exact: int = Field(description="Calls whose output equals the recorded output.")
    exact_ratio: float = Field(description="exact / calls (1.0 when there are no calls).")
    faulted: int = Field(default=0, description="Calls with an injected fault (not compared).")
    outcome_agree: int = Field(description="Runs whose evaluation equals the recorded reward.")
    final_state_compared: int = Field(default=0, description="Runs with a recorded submission.")
    final_state_agree: int = Field(
        default=0, description="Of those, runs whose final state equals the submission."
    )
    skipped: int = Field(description="Runs of environments that cannot be replayed.")
    skipped_environments: list[str] = Field(description="Those environments.")
    by_environment: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="runs, calls, exact, outcome_agree per environment."
    )
    mismatches: list[Mismatch] = Field(description="Every differing call or outcome.")


def replayable(trajectory: Trajectory) -> bool:
    return bool(trajectory.task.environment) and trajectory.task.environment in ENVIRONMENTS.names()


def replay_many(trajectories: Iterable[Trajectory], explicit: bool = False) -> ReplaySummary:
    """Replay every run; with `explicit`, a run that cannot be replayed is an error."""
    reports: list[RunReplay] = []
    skipped: list[str] = []
    for trajectory in trajectories:
        if not replayable(trajectory):
            if explicit:
                make_env(trajectory)  # raises the one-line reason
            skipped.append(trajectory.task.environment or "(none)")
            continue
        env = make_env(trajectory)
        reason = env.cannot_serve(trajectory.task) if isinstance(env, ServesTasks) else None
        if reason is not None:
            if explicit:
                raise UserError(f"trajectory {trajectory.id} cannot be replayed: {reason}")
            skipped.append(f"{env.name} (no data for the task)")
            continue
        try:
            reports.append(replay_run(trajectory, env))
        finally:
            env.close()
    if not reports:
        raise UserError(
            "no replayable runs selected"
            + (f" (skipped environments: {', '.join(sorted(set(skipped)))})" if skipped else "")
        )
    calls = sum(r.calls for r in reports)
    exact = sum(r.exact for r in reports)
    return ReplaySummary(
        runs=len(reports),
        calls=calls,
        exact=exact,
        exact_ratio=exact / calls if calls else 1.0,
        faulted=sum(r.faulted for r in reports),
        outcome_agree=sum(r.outcome_agree for r in reports),
        final_state_compared=sum(r.final_state_agree is not None for r in reports),
        final_state_agree=sum(bool(r.final_state_agree) for r in reports),
        skipped=len(skipped),
        skipped_environments=sorted(set(skipped)),
        by_environment={
            env: _totals([r for r in reports if r.environment == env])
            for env in sorted({r.environment or "(none)" for r in reports})
        },
        mismatches=[m for r in reports for m in r.mismatches],
    )


def _totals(reports: list[RunReplay]) -> dict[str, int]:
    return {
        "runs": len(reports),
        "calls": sum(r.calls for r in reports),
        "exact": sum(r.exact for r in reports),
        "outcome_agree": sum(r.outcome_agree for r in reports),
    }

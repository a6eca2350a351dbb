"""The episode loop: a policy acts in an environment (with a user, for conversations).

One loop serves fresh rollouts and forks: a fork passes the parent's prefix as `trajectory`
with the environment already restored to the state after that prefix.

The loop never loses a run: an exception from the policy, the user or the environment ends
the episode with termination reason `error` (the error is kept in `metadata["error"]`) and
the trajectory is returned for the caller to store. A model call that failed every
attempt of the retry policy ends it with reason `model_error` (`metadata["model_failure"]`);
such a run is not judged (`success` and `reward` unknown, status `model_error`): it says
nothing about the agent.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, Policy, UserSimulator
from trajforge.envs.base import USER_STOP, Environment, TextActions
from trajforge.errors import EpisodeEnd
from trajforge.models.retry import ModelCallFailed
from trajforge.schema import (
    Fault,
    Message,
    Outcome,
    Source,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
    Usage,
)

StepHook = Callable[[Trajectory], None]
"""Called after every agent step; may raise `EpisodeEnd` (for example a monitor stop)."""


class Limits(BaseModel):
    """When an episode is cut short."""

    max_steps: int = Field(default=50, description="Assistant messages at most.")
    max_tokens: int | None = Field(default=None, description="Model tokens at most.")
    max_wall_s: float | None = Field(default=None, description="Wall-clock seconds at most.")


def start_trajectory(env: Environment, task: Task, source: Source | None = None) -> Trajectory:
    """Reset `env` to `task` and return the trajectory holding the opening messages."""
    opening = env.reset(task)
    return Trajectory(task=task, source=source or Source(), messages=list(opening), tools=env.tools)


def run_episode(
    env: Environment,
    policy: Policy,
    task: Task,
    *,
    user: UserSimulator | None = None,
    trajectory: Trajectory | None = None,
    limits: Limits | None = None,
    hooks: Sequence[StepHook] = (),
    source: Source | None = None,
) -> Trajectory:
    """Run until the agent, user or environment ends the episode or a limit is hit."""
    traj = trajectory if trajectory is not None else start_trajectory(env, task, source)
    started = time.time()
    try:
        reason = _loop(env, policy, traj, user, limits or Limits(), hooks, started)
    except EpisodeEnd as end:
        reason = end.reason
        if isinstance(end, ModelCallFailed):
            traj.metadata["model_failure"] = end.failure
    except Exception as exc:  # record the crash: the run's trajectory must survive
        reason = "error"
        traj.metadata["error"] = "".join(traceback.format_exception_only(exc)).strip()
        traj.metadata["traceback"] = traceback.format_exc(limit=8)
    traj.outcome = _evaluate(env, traj, reason)
    traj.usage = _total_usage(traj, time.time() - started)
    return traj


def _loop(env, policy, traj, user, limits, hooks, started) -> TerminationReason:
    while True:
        stop = _limit_reached(traj, limits, started)
        if stop:
            return stop
        state = EpisodeState(
            task=traj.task,
            messages=traj.messages,
            tools=traj.tools,
            env=env,
            step=len(traj.assistant_indices()),
        )
        _append_policy_step(traj, policy.act(state))
        message = traj.messages[-1]
        for hook in hooks:
            hook(traj)
        if message.tool_calls:
            if _run_tools(env, traj, message.tool_calls):
                return "env_done"
            continue
        text_call = env.text_action(message) if isinstance(env, TextActions) else None
        if text_call is not None:
            if run_text_action(env, traj, text_call):
                return "env_done"
            continue
        if user is None:
            return "agent_stop"
        reply = user.reply(state.model_copy(update={"messages": traj.messages}))
        traj.messages.append(reply)
        if USER_STOP in reply.text():
            return "user_stop"


def _append_policy_step(traj: Trajectory, step) -> None:
    index = len(traj.messages)
    traj.messages.append(step.message)
    if step.llm_call is not None:
        step.llm_call.message_index = index
        traj.llm_calls.append(step.llm_call)
    if step.label is not None:
        step.label.message_index = index
        traj.labels.append(step.label)


def _run_tools(env: Environment, traj: Trajectory, calls: list[ToolCall]) -> bool:
    """Execute calls, append tool messages and faults; True when the environment is done."""
    done = False
    for call in calls:
        result = env.step(call)
        index = len(traj.messages)
        traj.messages.append(
            Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        )
        if result.fault:
            traj.faults.append(Fault.model_validate({"message_index": index, **result.fault}))
        done = done or result.done
    return done


def run_text_action(env: Environment, traj: Trajectory, call: ToolCall) -> bool:
    """Execute an action written in the assistant's text and append its answer (a user
    message); True when the environment is done."""
    if not isinstance(env, TextActions):
        raise TypeError(f"environment {env.name} does not read actions from text")
    result = env.step(call)
    traj.messages.append(env.observation(result))
    return bool(result.done)


def _limit_reached(traj: Trajectory, limits: Limits, started: float) -> TerminationReason | None:
    if len(traj.assistant_indices()) >= limits.max_steps:
        return "max_steps"
    if limits.max_tokens is not None and _tokens(traj) >= limits.max_tokens:
        return "max_tokens"
    if limits.max_wall_s is not None and time.time() - started >= limits.max_wall_s:
        return "max_wall_time"
    return None


def _tokens(traj: Trajectory) -> int:
    return sum((c.usage.total_tokens or 0) for c in traj.llm_calls if c.usage)


def _evaluate(env: Environment, traj: Trajectory, reason: TerminationReason) -> Outcome:
    try:
        outcome = env.evaluate()
    except Exception as exc:  # an evaluation crash must not lose the run either
        traj.metadata.setdefault("error", f"evaluate failed: {exc}")
        outcome = Outcome(success=False, reward=0.0, judged_by="error")
    outcome.termination_reason = reason
    outcome.not_judged_for_model_error()
    return outcome


def _total_usage(traj: Trajectory, wall: float) -> Usage:
    """Summed token usage of the run's model calls; None (unknown), not 0, if none reported any."""
    calls = [c.usage for c in traj.llm_calls if c.usage]
    if not calls:
        return Usage(wall_time_s=round(wall, 4))
    prompt = sum(u.prompt_tokens or 0 for u in calls)
    completion = sum(u.completion_tokens or 0 for u in calls)
    total = sum(
        u.total_tokens
        if u.total_tokens is not None
        else (u.prompt_tokens or 0) + (u.completion_tokens or 0)
        for u in calls
    )
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        wall_time_s=round(wall, 4),
    )

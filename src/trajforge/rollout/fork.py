"""Fork a trajectory at any message index and continue it with another policy.

`fork(parent, at, policy)` rebuilds the environment state after the parent's first `at`
messages (by replaying their tool calls), copies that prefix into a child trajectory and
lets `policy` continue from the identical state through `run_episode`. The child records
its parent and fork index (`Trajectory.parent`); labels, faults and LLM calls of the prefix
are kept. Forks are the building block of counterfactual localization, handoff, step
values and correction checks: call `fork` directly, or `trajforge fork` on the CLI.

Where the prefix stops matters:
- after the system prompt only: the user opens the conversation first;
- after an assistant message with tool calls that the prefix does not answer: those calls
  are executed first (the child's message `at` is their result);
- after an assistant message whose text holds an action (an environment of text actions,
  such as mini-swe-agent's bash blocks in `swe-bench`): the action is executed first;
- after an assistant message without tool calls: the user replies first;
- after the user's stop message, or once the environment is done (a hand-over to a
  human): nothing runs, the child is judged as it is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, Policy, UserSimulator
from trajforge.envs import make_env
from trajforge.envs.base import USER_STOP, EndsEpisodes, Environment, TextActions
from trajforge.envs.replay import answered_calls, replay_calls
from trajforge.errors import UserError
from trajforge.models.retry import ModelCallFailed
from trajforge.rollout.episode import Limits, run_episode, run_text_action
from trajforge.rollout.factory import ForkPoint, build, choose_user, open_conversation
from trajforge.schema import (
    MODEL_ERROR,
    ForkParent,
    Message,
    Source,
    TerminationReason,
    ToolCall,
    Trajectory,
)
from trajforge.store import Store


class ForkOptions(BaseModel):
    """How a fork runs."""

    limits: Limits = Field(default_factory=Limits, description="Limits of the continuation.")
    harness: str = Field(default="trajforge-fork", description="Source harness of the child.")


def resolve_parent(store_or_parent: Store | Trajectory, parent_id: str | None = None) -> Trajectory:
    """The parent trajectory: given directly, or looked up in a store by id (or prefix)."""
    if isinstance(store_or_parent, Trajectory):
        return store_or_parent
    if parent_id is None:
        raise UserError("fork from a store needs the parent trajectory id")
    return store_or_parent.get(parent_id)


def check_fork_index(parent: Trajectory, at: int) -> None:
    if at < 0:
        raise UserError(f"fork index {at} is negative; use 0..{len(parent.messages)}")
    if at > len(parent.messages):
        raise UserError(
            f"fork index {at} is past the end of trajectory {parent.id} "
            f"({len(parent.messages)} messages; use 0..{len(parent.messages)})"
        )


FORK_USAGE = (
    "call fork(parent_trajectory, at, policy), fork(store, 'ID', at, policy) "
    "or fork(store, at, policy, parent_id='ID')"
)


def _positional_id(
    store_or_parent: object, at: object, policy: Policy | str | int, rest: tuple
) -> tuple[object, Policy | str | int, str | None]:
    """(at, policy, parent_id) of a `fork(store, "ID", at, policy)` call; else unchanged."""
    if isinstance(store_or_parent, Store) and isinstance(at, str) and len(rest) == 1:
        return policy, rest[0], at
    if rest:
        raise UserError(f"fork got {3 + len(rest)} positional arguments; {FORK_USAGE}")
    return at, policy, None


def _check_call(store_or_parent: object, at: object, parent_id: str | None) -> int:
    """`at`, or a clear error for the common mistakes in calling `fork` from Python."""
    if not isinstance(store_or_parent, Store | Trajectory):
        raise UserError(f"fork needs a Trajectory or a Store first; {FORK_USAGE}")
    if isinstance(at, bool) or not isinstance(at, int):
        raise UserError(f"fork's `at` is a message index (int), got {at!r}; {FORK_USAGE}")
    if isinstance(store_or_parent, Store) and parent_id is None:
        raise UserError(f"fork from a store needs the parent id; {FORK_USAGE}")
    return at


def fork(
    store_or_parent: Store | Trajectory,
    at: int | str,
    policy: Policy | str | int,
    *rest: Policy | str,
    parent_id: str | None = None,
    user: UserSimulator | None = None,
    env: Environment | None = None,
    options: ForkOptions | None = None,
) -> Trajectory:
    """A child trajectory sharing the parent's first `at` messages, continued by `policy`.

    The parent is a Trajectory, or a Store with its id: `fork(store, "ID", at, policy)` or
    `fork(store, at, policy, parent_id="ID")`.
    `policy` is a policy object or a name for `build` (`expert`, `noisy-expert`,
    `replay`, `llm`...); replay brings its own user simulator. Without a `user`, a
    conversational environment (one whose opening has no user message) gets the scripted
    user. Nothing is stored: the caller decides (`store.add(child)`).
    """
    raw_at, chosen, positional_id = _positional_id(store_or_parent, at, policy, rest)
    parent_id = parent_id or positional_id
    index = _check_call(store_or_parent, raw_at, parent_id)
    if isinstance(chosen, int):
        raise UserError(f"fork's policy is a name or a Policy, got {chosen!r}; {FORK_USAGE}")
    parent = resolve_parent(store_or_parent, parent_id)
    check_fork_index(parent, index)
    options = options or ForkOptions()
    env = env or make_env(parent)
    opening = env.reset(parent.task)
    if isinstance(chosen, str):
        agent, named_user = build(chosen, parent=ForkPoint(parent, index))
        user = user or named_user
    else:
        agent = chosen
    user = choose_user(user, opening)
    replay_calls(env, parent, index)
    child = prefix_child(parent, index, agent, options)
    env.bind_conversation(child.messages)
    try:
        user_stopped = prepare_turn(env, child, user)
    except ModelCallFailed as failed:  # the user model: the child is kept, as a model error
        child.metadata["model_failure"] = failed.failure
        return finish_stopped(env, child, MODEL_ERROR)
    if user_stopped:
        return finish_stopped(env, child, "user_stop")
    if isinstance(env, EndsEpisodes) and env.done:  # the prefix already ended it (a hand-over, say)
        return finish_stopped(env, child, "env_done")
    return with_run_id(
        run_episode(env, agent, child.task, user=user, trajectory=child, limits=options.limits)
    )


def prefix_child(parent: Trajectory, at: int, policy: Policy, options: ForkOptions) -> Trajectory:
    """The child before it continues: the parent's prefix and what points into it.

    Prefix messages are shallow copies: their fields are shared with the parent, so treat
    messages as immutable (append new ones; never edit a message in place).
    """
    return Trajectory(
        task=parent.task.model_copy(deep=True),
        source=Source(
            harness=options.harness,
            model=policy.name,
            run=f"fork:{parent.id}@{at}",
        ),
        messages=[m.model_copy() for m in parent.messages[:at]],
        tools=list(parent.tools),
        llm_calls=[c for c in parent.llm_calls if (c.message_index or 0) < at],
        faults=[f for f in parent.faults if f.message_index < at],
        labels=[
            lb for lb in parent.labels if lb.message_index is not None and lb.message_index < at
        ],
        parent=ForkParent(trajectory_id=parent.id, message_index=at),
        metadata={"fork": {"parent": parent.id, "at": at, "policy": policy.name}},
    )


def prepare_turn(env: Environment, child: Trajectory, user: UserSimulator | None) -> bool:
    """Bring the child to a point where the policy acts next; True when the user stopped."""
    if not child.messages:
        child.messages.extend(env.reset(child.task))
        _restore_binding(env, child)
    if not child.tools:
        child.tools = env.tools
    last = child.messages[-1]
    if last.role == "user" and USER_STOP in last.text():
        return True
    if last.role == "system" and user is not None:
        child.messages.append(_opening(user, child))
    elif last.role == "assistant" and last.tool_calls:
        _answer_pending(env, child)
    elif last.role == "assistant" and (call := _text_action(env, last)) is not None:
        run_text_action(env, child, call)
    elif last.role == "assistant" and user is not None:
        reply = user.reply(_state(env, child))
        child.messages.append(reply)
        return USER_STOP in reply.text()
    return False


def _text_action(env: Environment, message: Message) -> ToolCall | None:
    return env.text_action(message) if isinstance(env, TextActions) else None


def _restore_binding(env: Environment, child: Trajectory) -> None:
    env.bind_conversation(child.messages)


def _opening(user: UserSimulator, child: Trajectory) -> Message:
    first = open_conversation(user, child.task)
    return first or Message(role="user", content=child.task.instruction or "Hello.")


def _answer_pending(env: Environment, child: Trajectory) -> None:
    """Execute the tool calls of the last message that the prefix leaves unanswered."""
    answered = {call.id for _, call, _ in answered_calls(child.messages, len(child.messages))}
    for call in child.messages[-1].tool_calls or []:
        if call.id in answered:
            continue
        result = env.step(call)
        child.messages.append(
            Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        )


def _state(env: Environment, child: Trajectory) -> EpisodeState:
    return EpisodeState(
        task=child.task,
        messages=child.messages,
        tools=child.tools,
        env=env,
        step=len(child.assistant_indices()),
    )


def finish_stopped(env: Environment, child: Trajectory, reason: TerminationReason) -> Trajectory:
    """Judge a child whose prefix already ended the episode (user stop, environment done), or
    whose user model could not be reached before the policy acted (not judged)."""
    child.outcome = env.evaluate()
    child.outcome.termination_reason = reason
    child.outcome.not_judged_for_model_error()
    return with_run_id(child)


def with_run_id(traj: Trajectory) -> Trajectory:
    """Set the id of a run made here from its content without clock readings.

    Wall time, call latencies and start times differ between two runs that did the same
    thing; hashing them would store the same fork twice. They stay in the document.
    """
    if not traj.id:
        timeless = traj.model_copy(
            update={
                "usage": traj.usage.model_copy(update={"wall_time_s": None}),
                "llm_calls": [
                    c.model_copy(update={"latency_s": None, "started_at": None})
                    for c in traj.llm_calls
                ],
            }
        )
        traj.id = timeless.content_id()
    return traj


def fork_summary(child: Trajectory) -> dict[str, Any]:
    """The fields `trajforge fork --json` prints."""
    return {
        "id": child.id,
        "parent": child.parent.trajectory_id if child.parent else None,
        "at": child.parent.message_index if child.parent else None,
        "policy": child.source.model,
        "success": child.outcome.success,
        "status": child.outcome.status,
        "reward": child.outcome.reward,
        "termination_reason": child.outcome.termination_reason,
        "n_messages": len(child.messages),
    }

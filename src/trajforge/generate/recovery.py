"""Recovery demonstrations: fork a run right after its error, let a teacher continue.

A recovery demonstration keeps the run up to and including the wrong action and what the
environment answered, restores the environment to that state (by replay), and lets a
teacher policy continue to the end. As training rows (`trajforge.generate.rows`) the wrong
action stays in the prompts as context only (never a completion); each of the other actions,
the teacher's continuation among them, is the completion of one prompt-completion row. Only
continuations that end in success are kept: they are verified recoveries.

Where the error is: a labelled deliberate error (a noisy teacher's mistake), or, for a
student's own failed run, the first step at which the teacher would have acted otherwise
(`first_disagreement`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from trajforge.agents.base import EpisodeState, Policy
from trajforge.envs.base import Environment
from trajforge.envs.replay import replay_to
from trajforge.generate.rows import Writer, run_rows
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message, Trajectory


def household_rows(
    traj: Trajectory, masked: Iterable[int] = (), kind: str = "demo", writer: Writer = "lab"
) -> list[dict[str, Any]]:
    """The training rows of a household run: `masked` assistant turns (and the run's
    labelled mistakes) are context only, and so is assistant text without a tool call
    (household actions are tool calls; a closing remark is not an action to learn)."""
    return run_rows(traj, writer, not_learned=masked, actions_only=True, kind=kind)


def error_end(traj: Trajectory, error_index: int) -> int:
    """Index just past the wrong action's tool results."""
    end = error_index + 1
    while end < len(traj.messages) and traj.messages[end].role == "tool":
        end += 1
    return end


def recover(
    env: Environment, parent: Trajectory, error_index: int, teacher: Policy, max_steps: int
) -> Trajectory:
    """The parent up to its error (and the answer to it), continued by `teacher`."""
    end = error_end(parent, error_index)
    replay_to(env, parent, end)
    child = Trajectory(
        task=parent.task,
        source=parent.source,
        messages=[m.model_copy(deep=True) for m in parent.messages[:end]],
        tools=parent.tools,
        metadata={"recovered_from": parent.id or parent.content_id(), "error_index": error_index},
    )
    prefix_steps = len(child.assistant_indices())
    return run_episode(
        env,
        teacher,
        parent.task,
        trajectory=child,
        limits=Limits(max_steps=prefix_steps + max_steps),
    )


def first_labelled_error(traj: Trajectory) -> int | None:
    """Message index of the first deliberate error label, if any."""
    indices = [label.message_index for label in traj.labels if label.category == "deliberate_error"]
    return min((i for i in indices if i is not None), default=None)


def action_key(message: Message) -> list[tuple[str, Any]]:
    """What an assistant message does: its tool calls with parsed arguments, else its text."""
    if not message.tool_calls:
        return [("say", message.text())]
    return [(c.name, _parsed(c.arguments)) for c in message.tool_calls]


def _parsed(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments


def first_disagreement(
    env_factory: Callable[[], Environment], traj: Trajectory, teacher: Policy
) -> int | None:
    """First assistant message where `teacher`, in the same state, would act otherwise."""
    env = env_factory()
    for index in traj.assistant_indices():
        replay_to(env, traj, index)
        state = EpisodeState(
            task=traj.task,
            messages=traj.messages[:index],
            tools=traj.tools,
            env=env,
            step=len([i for i in traj.assistant_indices() if i < index]),
        )
        wanted = teacher.act(state).message
        if action_key(wanted) != action_key(traj.messages[index]):
            return index
    return None


def recovery_rows(
    env_factory: Callable[[], Environment],
    runs: Iterable[tuple[Trajectory, int]],
    teacher: Policy,
    max_steps: int,
    kind: str,
) -> list[dict[str, Any]]:
    """The rows of verified recovery demonstrations of (run, error index) pairs."""
    rows = []
    for parent, error_index in runs:
        child = recover(env_factory(), parent, error_index, teacher, max_steps)
        if child.outcome.success:
            rows += household_rows(child, masked=[error_index], kind=kind)
    return rows

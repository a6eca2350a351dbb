"""The `gold` policy: applies the task's reference patch, then submits (SWE-bench runs).

It writes its actions as mini-swe-agent does, one ```bash block per message, so it
continues recorded mini-swe-agent runs in their own form: first a command that resets the
worktree and applies the patch with `git apply`, then the submit command.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.envs.swe_bench.env import SUBMIT_COMMAND, apply_command, bash_message
from trajforge.errors import UserError


@runtime_checkable
class GoldPatchSource(Protocol):
    """An environment that knows its task's reference patch."""

    def gold_patch(self) -> str: ...


class GoldPolicy:
    """See module docstring."""

    name = "gold"

    def __init__(self) -> None:
        self.applied = False

    def act(self, state: EpisodeState) -> PolicyStep:
        if not isinstance(state.env, GoldPatchSource):
            raise UserError(
                "the gold policy needs an environment with a reference patch (swe-bench)"
            )
        if not self.applied:
            self.applied = True
            command = apply_command(state.env.gold_patch())
            thought = "Reset the worktree and apply the reference patch."
            return PolicyStep(message=bash_message(thought, command))
        thought = "The reference patch is applied; submit it."
        return PolicyStep(message=bash_message(thought, SUBMIT_COMMAND))

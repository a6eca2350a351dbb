"""The `gold` policy: applies the task's reference patch, then submits (SWE-bench runs).

It writes its actions as mini-swe-agent does, one ```bash block per message, so it
continues recorded mini-swe-agent runs in their own form: first a command that applies the
patch with `git apply` (the patch in a here-document, or base64 when its text could end the
block early), then the submit command.
"""

from __future__ import annotations

import base64
from typing import Protocol, runtime_checkable

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.errors import UserError
from trajforge.schema import Message

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
_END = "TRAJFORGE_GOLD_PATCH"


@runtime_checkable
class GoldPatchSource(Protocol):
    """An environment that knows its task's reference patch."""

    def gold_patch(self) -> str: ...


def apply_command(patch: str) -> str:
    """A bash command applying `patch` in the current folder."""
    if "```" in patch or _END in patch:
        encoded = base64.b64encode(patch.encode()).decode()
        return f"echo {encoded} | base64 -d | git apply --verbose"
    return f"git apply --verbose <<'{_END}'\n{patch.rstrip(chr(10))}\n{_END}"


def _bash_message(thought: str, command: str) -> PolicyStep:
    text = f"THOUGHT: {thought}\n\n```bash\n{command}\n```"
    return PolicyStep(message=Message(role="assistant", content=text))


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
            command = (
                f"git checkout -q -- . && git clean -fdq && {apply_command(state.env.gold_patch())}"
            )
            return _bash_message("Reset the worktree and apply the reference patch.", command)
        return _bash_message("The reference patch is applied; submit it.", SUBMIT)

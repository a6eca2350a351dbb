"""Replay of a recorded run's remaining turns: the `replay` policy and its user.

Forking a run at message N with the replay policy continues with the parent's own
assistant messages from N on (their tool calls re-executed in the restored environment),
and `ReplayUser` answers with the parent's user messages. A fork that replays the whole
remainder reproduces the parent: a check of fork fidelity.
"""

from __future__ import annotations

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.envs.base import USER_STOP
from trajforge.errors import EpisodeEnd, UserError
from trajforge.schema import Message, Trajectory


class ParentScript:
    """The parent's messages after the fork point, consumed in order by role."""

    def __init__(self, parent: Trajectory, at: int) -> None:
        self.remaining = [m for m in parent.messages[at:] if m.role in ("assistant", "user")]
        self.cursor = 0

    def next(self, role: str) -> Message | None:
        """The next message of `role`, skipping (and consuming) messages of the other role."""
        while self.cursor < len(self.remaining):
            message = self.remaining[self.cursor]
            self.cursor += 1
            if message.role == role:
                return message
        return None


class ReplayPolicy:
    """Answers with the parent's next assistant message; ends the episode when none is left."""

    name = "replay"

    def __init__(self, parent: Trajectory, at: int, script: ParentScript | None = None) -> None:
        self.script = script or ParentScript(parent, at)

    @classmethod
    def from_spec(cls, options: PolicyOptions, seed: int, parent: ForkPoint | None) -> ReplayPolicy:
        """The parent's remaining turns; a run without a parent has none to replay."""
        if parent is None:
            raise UserError(
                "the replay policy continues a stored run: use it with fork, not rollout or handoff"
            )
        return cls(parent.run, parent.at)

    def user(self) -> ReplayUser:
        """The parent's user, reading the same script."""
        return ReplayUser(self.script)

    def act(self, state: EpisodeState) -> PolicyStep:
        message = self.script.next("assistant")
        if message is None:
            raise EpisodeEnd("replay_end", "the recorded run has no more assistant messages")
        return PolicyStep(message=message.model_copy(deep=True))


class ReplayUser:
    """Answers with the parent's next user message; stops when none is left."""

    name = "replay-user"

    def __init__(self, script: ParentScript) -> None:
        self.script = script

    def reply(self, state: EpisodeState) -> Message:
        message = self.script.next("user")
        if message is None:
            return Message(role="user", content=USER_STOP)
        return message.model_copy(deep=True)

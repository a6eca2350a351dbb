"""A tiny environment for stop-hook tests: a door that never opens."""

from __future__ import annotations

from typing import Any

from trajforge.agents.llm import LLMPolicy
from trajforge.envs.base import EnvironmentBase, StepResult
from trajforge.models.scripted import ScriptedModel
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message, Outcome, Task, ToolCall, Trajectory


class LockedDoorEnv(EnvironmentBase):
    """A one-tool environment whose door never opens: every `open_door` call fails."""

    name = "locked-door"

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "open_door", "parameters": {}}}]

    def reset(self, task: Task) -> list[Message]:
        return [
            Message(role="system", content="Open the door."),
            Message(role="user", content="go"),
        ]

    def step(self, call: ToolCall) -> StepResult:
        return StepResult(content="Error: the door is locked", error=True)

    def evaluate(self) -> Outcome:
        return Outcome(success=False, reward=0.0, judged_by="env")

    def snapshot(self) -> None:
        return None

    def restore(self, state: Any) -> None:
        return None


def knock(messages: list[Message]) -> Message:
    call = ToolCall(id=f"c{len(messages)}", name="open_door", arguments="{}")
    return Message(role="assistant", content="Let me try again.", tool_calls=[call])


def looping_run(steps: int) -> Trajectory:
    """A recorded run of `steps` identical failing calls."""
    model = ScriptedModel([knock], cycle=True)
    return run_episode(
        LockedDoorEnv(), LLMPolicy(model), Task(id="door"), limits=Limits(max_steps=steps)
    )

"""What a run asks of its agents: the policy by name, its options and the user simulator.

`AgentSpec` is plain data (it travels to worker processes and Ray tasks, and its options are
part of an episode key). A policy class says how it is made from a spec by implementing
`BuiltFromSpec`; a class without it is constructed without arguments. The single place that
turns a spec into objects is `trajforge.rollout.factory.build`.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from trajforge.agents.base import Policy, UserSimulator
from trajforge.models.openai_compat import OpenAIModelConfig
from trajforge.schema import Message, Task, Trajectory

UserKind = Literal["scripted", "llm"]
"""`scripted`: the offline simulator (where the environment needs a user); `llm`: a model."""


class PolicyOptions(BaseModel):
    """Options a policy may take (each policy uses the ones it knows)."""

    error_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="noisy-expert mistakes.")
    base_url: str | None = Field(default=None, description="llm: endpoint base URL.")
    model: str | None = Field(default=None, description="llm: model name.")
    api_key: str | None = Field(
        default=None, description="llm: API key (left out of episode keys and trajectories)."
    )
    temperature: float = Field(default=0.0, ge=0.0, description="llm: sampling temperature.")
    strategies: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Retrieved strategy texts by task id, shown to policies that read guidance "
        "(llm: at the end of the system prompt). Only the episode's own task's count in its key.",
    )

    def endpoint(self) -> OpenAIModelConfig:
        """The OpenAI-compatible endpoint of the llm policy and the llm user."""
        return OpenAIModelConfig(
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            temperature=self.temperature,
        )


class AgentSpec(BaseModel):
    """Which policy and user simulator to run."""

    policy: str = Field(description="A registered policy name or module:Class.")
    options: PolicyOptions = Field(default_factory=PolicyOptions, description="Its options.")
    user: UserKind = Field(default="scripted", description="User simulator.")


class ForkPoint(NamedTuple):
    """A recorded run and the message index a continuation starts from."""

    run: Trajectory
    at: int


@runtime_checkable
class BuiltFromSpec(Protocol):
    """A policy class made from the spec's options, the episode seed and the fork point."""

    @classmethod
    def from_spec(cls, options: PolicyOptions, seed: int, parent: ForkPoint | None) -> Policy: ...


@runtime_checkable
class BringsUser(Protocol):
    """A policy that comes with its own user simulator (replay answers as the parent's user)."""

    def user(self) -> UserSimulator: ...


@runtime_checkable
class OpensConversation(Protocol):
    """A user simulator that speaks first."""

    def opening(self, task: Task) -> Message: ...

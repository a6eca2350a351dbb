"""Policies and user simulators by name, for forks, handoff and the CLI.

`build_agents(spec)` returns the (policy, user simulator) pair a run needs:
- `expert`: the environment oracle's gold actions;
- `noisy-expert`: the expert with a seeded error rate (mistakes labelled, source oracle);
- `replay`: the parent's remaining assistant messages, with the parent's user messages;
- `llm`: a chat model behind any OpenAI-compatible endpoint (or a given `ChatModel`);
- any other registered policy name or `module:Class` (constructed without arguments).
The user is the scripted simulator unless `user="llm"`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from trajforge.agents import POLICIES, LLMPolicy, NoisyExpertPolicy
from trajforge.agents.base import Policy, UserSimulator
from trajforge.agents.replay import ParentScript, ReplayPolicy, ReplayUser
from trajforge.agents.user_sim import LLMUser, ScriptedUser
from trajforge.errors import UserError
from trajforge.models.base import ChatModel
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.schema import Trajectory

UserKind = Literal["scripted", "llm"]


class AgentSpec(BaseModel):
    """Which policy and user simulator to run."""

    policy: str = Field(description="expert, noisy-expert, replay, llm, or module:Class.")
    seed: int = Field(default=0, description="Seed of the noisy expert's mistakes.")
    error_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="Noisy expert error rate.")
    user: UserKind = Field(default="scripted", description="User simulator.")
    llm: OpenAIModelConfig = Field(
        default_factory=OpenAIModelConfig, description="Endpoint for the llm policy or user."
    )


def build_agents(
    spec: AgentSpec,
    *,
    parent: Trajectory | None = None,
    at: int = 0,
    model: ChatModel | None = None,
    user_model: ChatModel | None = None,
) -> tuple[Policy, UserSimulator]:
    """The policy and user for `spec`; `model` / `user_model` replace the endpoint."""
    if spec.policy == "replay":
        if parent is None:
            raise UserError("the replay policy needs a parent trajectory (use it with fork)")
        script = ParentScript(parent, at)
        return ReplayPolicy(parent, at, script), ReplayUser(script)
    return _policy(spec, model), _user(spec, user_model)


def _policy(spec: AgentSpec, model: ChatModel | None) -> Policy:
    if spec.policy == "llm":
        return LLMPolicy(model or OpenAICompatibleModel(spec.llm))
    if spec.policy == "noisy-expert":
        return NoisyExpertPolicy(seed=spec.seed, error_rate=spec.error_rate)
    return POLICIES.get(spec.policy)()


def _user(spec: AgentSpec, user_model: ChatModel | None) -> UserSimulator:
    if spec.user == "llm":
        return LLMUser(user_model or OpenAICompatibleModel(spec.llm))
    return ScriptedUser()

"""The one way from names to the parts of an episode: environment, policy, user simulator.

`make_env(name_or_run)` builds an environment; `build(spec, seed, parent)` builds the policy
and the user simulator a spec asks for. A policy name reaches its class only through the
`POLICIES` registry (a name or `module:Class`); the class says how it is made from the
spec's options, the seed and the fork point (`BuiltFromSpec`), or takes no arguments.
Everything is built fresh for each episode from plain data, so an episode runs the same in
a thread, a worker process or a Ray task.
"""

from __future__ import annotations

from typing import NamedTuple

from trajforge.agents import POLICIES
from trajforge.agents.base import Policy, UserSimulator
from trajforge.agents.spec import (
    AgentSpec,
    BringsUser,
    BuiltFromSpec,
    ForkPoint,
    OpensConversation,
    PolicyOptions,
    UserKind,
)
from trajforge.agents.user_sim import LLMUser, ScriptedUser
from trajforge.envs import make_env
from trajforge.models.openai_compat import OpenAICompatibleModel
from trajforge.schema import Message, Task

__all__ = [
    "AgentSpec",
    "Agents",
    "ForkPoint",
    "PolicyOptions",
    "UserKind",
    "build",
    "choose_user",
    "make_env",
    "needs_user",
    "open_conversation",
]


class Agents(NamedTuple):
    """The policy and user simulator of one run."""

    policy: Policy
    user: UserSimulator | None
    """The user the spec asks for; None: the scripted one, where needed (`choose_user`)."""


def build(spec: AgentSpec | str, seed: int = 0, parent: ForkPoint | None = None) -> Agents:
    """Fresh agents for `spec` (or a bare policy name); `seed` drives any randomness and
    `parent` is the run a continuation forks from (the replay policy needs it)."""
    if isinstance(spec, str):
        spec = AgentSpec(policy=spec)
    policy = _policy(spec, seed, parent)
    return Agents(policy, _user(spec, policy))


def _policy(spec: AgentSpec, seed: int, parent: ForkPoint | None) -> Policy:
    policy_class = POLICIES.get(spec.policy)
    if isinstance(policy_class, BuiltFromSpec):
        return policy_class.from_spec(spec.options, seed, parent)
    policy: Policy = policy_class()
    return policy


def _user(spec: AgentSpec, policy: Policy) -> UserSimulator | None:
    if isinstance(policy, BringsUser):
        return policy.user()
    if spec.user == "llm":
        return LLMUser(OpenAICompatibleModel(spec.options.endpoint()))
    return None


def needs_user(opening: list[Message]) -> bool:
    """A conversational task: the opening has no user message, so a simulator must speak."""
    return not any(message.role == "user" for message in opening)


def choose_user(user: UserSimulator | None, opening: list[Message]) -> UserSimulator | None:
    """The given user, else the scripted simulator when the environment is conversational."""
    if user is not None:
        return user
    return ScriptedUser() if needs_user(opening) else None


def open_conversation(user: UserSimulator, task: Task) -> Message | None:
    """The user's first message, when the simulator opens conversations."""
    return user.opening(task) if isinstance(user, OpensConversation) else None

"""Building the parts of one episode by name: environment, policy, user simulator.

Everything is built fresh for each episode from plain data, so an episode runs the same in
a thread, a worker process or a Ray task.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel, Field

from trajforge.agents import POLICIES, UserSimulator
from trajforge.envs import ENVIRONMENTS
from trajforge.errors import UserError
from trajforge.schema import Message, Task


class PolicyOptions(BaseModel):
    """Options a policy may take (each policy uses the ones it knows)."""

    error_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="noisy-expert mistakes.")
    base_url: str | None = Field(default=None, description="llm: endpoint base URL.")
    model: str | None = Field(default=None, description="llm: model name.")
    api_key: str | None = Field(
        default=None, description="llm: API key (left out of episode keys and trajectories)."
    )
    temperature: float = Field(default=0.0, ge=0.0, description="llm: sampling temperature.")


def make_env(name: str) -> Any:
    """A fresh environment from the registry (a name or `module:Class`)."""
    factory = ENVIRONMENTS.get(name)
    return factory()


def make_policy(name: str, options: PolicyOptions, seed: int) -> Any:
    """A fresh policy; `seed` drives any randomness it has."""
    if name == "llm":
        return _llm_policy(options)
    if name == "replay":
        raise UserError("the replay policy continues a stored run: use it with fork, not rollout")
    factory = POLICIES.get(name)
    if name == "noisy-expert":
        return factory(seed=seed, error_rate=options.error_rate)
    accepted = _parameters(factory)
    offered = {"seed": seed, **options.model_dump(exclude_none=True)}
    return factory(**{key: value for key, value in offered.items() if key in accepted})


def _parameters(factory: Any) -> set[str]:
    try:
        return set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return set()


def _llm_policy(options: PolicyOptions) -> Any:
    from trajforge.agents.llm import LLMPolicy
    from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig

    config = OpenAIModelConfig(
        base_url=options.base_url,
        api_key=options.api_key,
        model=options.model,
        temperature=options.temperature,
    )
    return LLMPolicy(OpenAICompatibleModel(config))


def needs_user(opening: list[Message]) -> bool:
    """A conversational task: the opening has no user message, so a simulator must speak."""
    return not any(message.role == "user" for message in opening)


def make_user(env: Any) -> UserSimulator:
    """The scripted user simulator of a conversational environment."""
    try:
        from trajforge.agents.user_sim import ScriptedUser
    except ImportError:
        raise UserError(
            f"environment '{env.name}' is conversational and needs a user simulator "
            "(trajforge.agents.user_sim), which this installation lacks"
        ) from None
    return ScriptedUser()


def open_conversation(user: UserSimulator, task: Task) -> Message | None:
    """The user's first message, when the simulator opens conversations."""
    opening = getattr(user, "opening", None)
    return opening(task) if callable(opening) else None

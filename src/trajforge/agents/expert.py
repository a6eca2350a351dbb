"""Oracle-driven policies: the expert, and the noisy expert that makes labelled mistakes."""

from __future__ import annotations

import random
from typing import Any, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.envs.base import Environment, Oracle
from trajforge.errors import UserError
from trajforge.schema import Label, Message, ToolCall


@runtime_checkable
class Distractor(Protocol):
    """Optional environment method: a plausible but wrong action, for synthetic failures."""

    def distractor_action(self, rng: random.Random) -> ToolCall | None: ...


def _oracle(state: EpisodeState) -> Oracle:
    if not isinstance(state.env, Oracle):
        raise UserError(f"environment '{_env_name(state.env)}' has no oracle")
    return state.env


def _env_name(env: object) -> str:
    """The environment's registered name, else its class name."""
    return env.name if isinstance(env, Environment) else type(env).__name__


def _as_step(action: ToolCall | Message | None, step: int) -> PolicyStep:
    if action is None:
        return PolicyStep(message=Message(role="assistant", content="I am done."))
    if isinstance(action, Message):
        return PolicyStep(message=action)
    call = action.model_copy(update={"id": action.id or f"call_{step}"})
    return PolicyStep(message=Message(role="assistant", content=None, tool_calls=[call]))


class ExpertPolicy:
    """Takes the environment oracle's `expert_action()` at every step."""

    name = "expert"

    def act(self, state: EpisodeState) -> PolicyStep:
        return _as_step(_oracle(state).expert_action(), state.step)


class NoisyExpertConfig(BaseModel):
    """How often and how reproducibly the noisy expert errs."""

    error_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="Chance of a mistake.")
    seed: int = Field(default=0, description="Seed of the mistake generator.")


class NoisyExpertPolicy:
    """The expert, except that with probability `error_rate` it takes a wrong action.

    Each deliberate mistake is labelled (source `oracle`, category `deliberate_error`) at the
    message index it lands on, so synthetic failures carry their ground truth.
    """

    name = "noisy-expert"

    def __init__(self, config: NoisyExpertConfig | None = None, **overrides: Any) -> None:
        self.config = (config or NoisyExpertConfig()).model_copy(update=overrides)
        self.rng = random.Random(self.config.seed)

    @classmethod
    def from_spec(
        cls, options: PolicyOptions, seed: int, parent: ForkPoint | None
    ) -> NoisyExpertPolicy:
        """Mistakes at the options' error rate, drawn from the episode seed."""
        return cls(seed=seed, error_rate=options.error_rate)

    def act(self, state: EpisodeState) -> PolicyStep:
        oracle = _oracle(state)
        if self.rng.random() < self.config.error_rate:
            wrong = self._distractor(state)
            if wrong is not None:
                step = _as_step(wrong, state.step)
                step.label = Label(
                    category="deliberate_error",
                    reason=f"noisy expert took {wrong.name}({wrong.arguments}) instead of "
                    "the expert action",
                    source="oracle",
                    agent="assistant",
                )
                return step
        return _as_step(oracle.expert_action(), state.step)

    def _distractor(self, state: EpisodeState) -> ToolCall | None:
        if isinstance(state.env, Distractor):
            call = state.env.distractor_action(self.rng)
        else:
            call = _random_tool_call(state.tools, self.rng)
        if call is None:
            return None
        return call.model_copy(update={"id": f"call_{state.step}_noise"})


def _random_tool_call(tools: list[dict[str, Any]], rng: random.Random) -> ToolCall | None:
    """Any tool with placeholder arguments: the generic mistake when an env offers none."""
    if not tools:
        return None
    function = rng.choice(tools)["function"]
    params = function.get("parameters", {}).get("properties", {})
    arguments = {name: "unknown" for name in params}
    return ToolCall(id="noise", name=function["name"], arguments=orjson.dumps(arguments).decode())

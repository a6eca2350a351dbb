"""A `GuidedRecovery` from command-line choices (teacher, user, sources, endpoint)."""

from __future__ import annotations

from typing import TypeVar, get_args

from pydantic import BaseModel, Field

from trajforge.agents.user_sim import ScriptedUser
from trajforge.errors import UserError
from trajforge.generate.guided.guidance import SOURCES, LLMGuidanceProposer, StrategyLookup
from trajforge.generate.guided.search import GuidedRecovery, RecoverConfig, StartMode
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.rollout.factory import AgentSpec, PolicyOptions, UserKind, build

T = TypeVar("T")


class RecoverSetup(BaseModel):
    """What `trajforge recover` was asked for."""

    teacher: str = Field(default="llm", description="Teacher policy: llm, expert, module:Class.")
    user: str = Field(default="scripted", description="User simulator: scripted or llm.")
    sources: list[str] | None = Field(default=None, description="None: every usable source.")
    starts: list[str] = Field(default_factory=lambda: ["decisive", "start"])
    rounds: int = 3
    intervene: bool = True
    max_steps: int = 40
    base_url: str | None = None
    llm_model: str | None = None
    api_key: str | None = None


def build_recovery(setup: RecoverSetup, strategies: StrategyLookup | None = None) -> GuidedRecovery:
    """The search the command asked for; `strategies` (retrieved from a library) makes the
    strategies source usable."""
    asked = _chosen("source", setup.sources or [], SOURCES)
    starts = _chosen("start", setup.starts, get_args(StartMode))
    user = _chosen("user", [setup.user], get_args(UserKind))[0]
    if "strategies" in asked and strategies is None:
        raise UserError("--source strategies needs --strategies K (how many to retrieve)")
    options = PolicyOptions(base_url=setup.base_url, model=setup.llm_model, api_key=setup.api_key)
    spec = AgentSpec(policy=setup.teacher, options=options, user=user)
    llm = options.endpoint()
    proposer = _proposer(llm, required="llm" in asked)
    usable = {"llm": proposer is not None, "strategies": strategies is not None}
    sources = asked or [s for s in SOURCES if usable.get(s, True)]
    config = RecoverConfig(
        sources=sources,
        starts=starts,
        llm_rounds=setup.rounds,
        intervene=setup.intervene,
        max_steps=setup.max_steps,
    )
    return GuidedRecovery(
        teacher=lambda: build(spec).policy,
        user=lambda: build(spec).user or ScriptedUser(),
        config=config,
        proposer=proposer,
        strategies=strategies,
    )


def _proposer(llm: OpenAIModelConfig, required: bool) -> LLMGuidanceProposer | None:
    """The LLM guidance proposer on the endpoint; None when no endpoint is configured and
    the llm source was not asked for explicitly (then the missing endpoint is an error)."""
    try:
        return LLMGuidanceProposer(OpenAICompatibleModel(llm))
    except UserError:
        if required:
            raise
        return None


def _chosen(name: str, values: list[str], allowed: tuple[T, ...]) -> list[T]:
    """`values` as members of `allowed`; a `UserError` naming the option for any other."""
    chosen: list[T] = []
    for value in values:
        member = next((a for a in allowed if a == value), None)
        if member is None:
            known = ", ".join(map(str, allowed))
            raise UserError(f"--{name} must be one of {known}, got '{value}'")
        chosen.append(member)
    return chosen

"""A `GuidedRecovery` from command-line choices (teacher, user, sources, endpoint)."""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.generate.guided.guidance import SOURCES, LLMGuidanceProposer
from trajforge.generate.guided.search import GuidedRecovery, RecoverConfig, StartMode
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.rollout.policy_factory import AgentSpec, build_agents


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


def build_recovery(setup: RecoverSetup) -> GuidedRecovery:
    _check(setup)
    llm = OpenAIModelConfig(base_url=setup.base_url, model=setup.llm_model, api_key=setup.api_key)
    spec = AgentSpec(policy=setup.teacher, user=setup.user, llm=llm)  # type: ignore[arg-type]
    proposer = _proposer(llm, required=bool(setup.sources and "llm" in setup.sources))
    sources = setup.sources or [s for s in SOURCES if s != "llm" or proposer is not None]
    config = RecoverConfig(
        sources=sources,  # type: ignore[arg-type]
        starts=setup.starts,  # type: ignore[arg-type]
        llm_rounds=setup.rounds,
        intervene=setup.intervene,
        max_steps=setup.max_steps,
    )
    return GuidedRecovery(
        teacher=lambda: build_agents(spec)[0],
        user=lambda: build_agents(spec)[1],
        config=config,
        proposer=proposer,
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


def _check(setup: RecoverSetup) -> None:
    _choices("source", setup.sources or [], SOURCES)
    _choices("start", setup.starts, get_args(StartMode))
    _choices("user", [setup.user], ("scripted", "llm"))


def _choices(name: str, values: list[str], allowed: tuple[str, ...]) -> None:
    for value in values:
        if value not in allowed:
            raise UserError(f"--{name} must be one of {', '.join(allowed)}, got '{value}'")

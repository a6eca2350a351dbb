"""Agents: policies and user simulators, and a registry of policies by name."""

from trajforge.agents.base import EpisodeState, Policy, PolicyStep, UserSimulator
from trajforge.agents.expert import Distractor, ExpertPolicy, NoisyExpertConfig, NoisyExpertPolicy
from trajforge.agents.llm import LLMPolicy
from trajforge.envs.base import USER_STOP
from trajforge.registry import Registry

POLICIES: Registry[type] = Registry("policy")
POLICIES.register("expert", "trajforge.agents.expert:ExpertPolicy")
POLICIES.register("noisy-expert", "trajforge.agents.expert:NoisyExpertPolicy")
POLICIES.register("household-teacher", "trajforge.agents.household_teacher:ObservableTeacher")
POLICIES.register(
    "noisy-household-teacher", "trajforge.agents.household_teacher:NoisyObservableTeacher"
)
POLICIES.register("replay", "trajforge.agents.replay:ReplayPolicy")
POLICIES.register("llm", "trajforge.agents.llm:LLMPolicy")
POLICIES.register("gold", "trajforge.agents.gold:GoldPolicy")

__all__ = [
    "POLICIES",
    "USER_STOP",
    "Distractor",
    "EpisodeState",
    "ExpertPolicy",
    "LLMPolicy",
    "NoisyExpertConfig",
    "NoisyExpertPolicy",
    "Policy",
    "PolicyStep",
    "UserSimulator",
]

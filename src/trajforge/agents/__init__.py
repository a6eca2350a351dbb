"""Agents: policies and user simulators, and a registry of policies by name."""

from trajforge.agents.base import USER_STOP, EpisodeState, Policy, PolicyStep, UserSimulator
from trajforge.registry import Registry

POLICIES: Registry[type] = Registry("policy")

__all__ = ["POLICIES", "USER_STOP", "EpisodeState", "Policy", "PolicyStep", "UserSimulator"]

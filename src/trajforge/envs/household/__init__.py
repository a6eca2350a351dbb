"""Household: procedurally generated text households (rooms, receptacles, objects)."""

from trajforge.envs.household.env import HouseholdConfig, HouseholdEnv, task_for
from trajforge.envs.household.world import Goal, generate_world

__all__ = ["Goal", "HouseholdConfig", "HouseholdEnv", "generate_world", "task_for"]

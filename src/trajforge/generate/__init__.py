"""Generators: turn signals on trajectories into training data."""

from trajforge.generate.rft import RFTConfig, TaskYield, select, verify_by_replay, write_sft
from trajforge.generate.views import write_views

__all__ = ["RFTConfig", "TaskYield", "select", "verify_by_replay", "write_sft", "write_views"]

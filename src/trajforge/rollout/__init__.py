"""Rollouts: the episode loop (and, later, batch runners and forks)."""

from trajforge.rollout.episode import Limits, StepHook, run_episode, start_trajectory

__all__ = ["Limits", "StepHook", "run_episode", "start_trajectory"]

"""Generators: turn signals on trajectories into training data."""

from trajforge.generate.views import write_views

__all__ = ["write_views"]

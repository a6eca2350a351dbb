"""Where episodes run: `local` (a thread pool in this process) or `ray` (Ray tasks).

A backend is a function `(specs, concurrency, progress) -> iterable of trajectories`,
yielding each trajectory as its episode finishes; the runner stores them.
"""

from trajforge.registry import Registry

BACKENDS: Registry = Registry("backend")
BACKENDS.register("local", "trajforge.rollout.backends.local:run_local")
BACKENDS.register("ray", "trajforge.rollout.backends.ray:run_ray")

__all__ = ["BACKENDS"]

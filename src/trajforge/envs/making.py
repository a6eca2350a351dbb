"""`make_env`: the one way from a name, or a recorded run, to a fresh environment."""

from __future__ import annotations

from trajforge.envs.base import ConfiguredByRecording, Environment
from trajforge.envs.registry import ENVIRONMENTS
from trajforge.errors import UserError
from trajforge.schema import Trajectory


def make_env(source: str | Trajectory) -> Environment:
    """A fresh environment by registered name (or `module:Class`), or the one that replays
    a recorded run (its task's environment, configured for what the recording shows)."""
    if isinstance(source, str):
        env: Environment = ENVIRONMENTS.get(source)()
        return env
    return _for_recording(source)


def _for_recording(trajectory: Trajectory) -> Environment:
    name = trajectory.task.environment
    if not name or name not in ENVIRONMENTS.names():
        known = ", ".join(ENVIRONMENTS.names())
        raise UserError(
            f"trajectory {trajectory.id}: environment '{name}' cannot be replayed "
            f"(replayable environments: {known})"
        )
    env_class = ENVIRONMENTS.get(name)
    if isinstance(env_class, ConfiguredByRecording):
        config = env_class.config_for_recording(trajectory.messages)
        recorded: Environment = env_class(config)
        return recorded
    fresh: Environment = env_class()
    return fresh

"""SWE: generated Python repositories with a seeded bug, fixed through sandboxed tools."""

from trajforge.envs.swe.env import SweConfig, SweEnv, task_for
from trajforge.envs.swe.repos import Repo, generate_repo
from trajforge.envs.swe.sandbox import SandboxConfig, available_backends, run_sandboxed

__all__ = [
    "Repo",
    "SandboxConfig",
    "SweConfig",
    "SweEnv",
    "available_backends",
    "generate_repo",
    "run_sandboxed",
    "task_for",
]

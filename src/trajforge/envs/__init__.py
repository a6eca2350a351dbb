"""Environments: the protocol, a registry by name and `make_env`.

Register an environment class with `ENVIRONMENTS.register(name, "module:Class")`; any
`module:Class` path also works where a name is expected.
"""

from trajforge.envs.base import Environment, Oracle, StepResult, TaskSet
from trajforge.envs.making import make_env
from trajforge.envs.registry import ENVIRONMENTS

__all__ = ["ENVIRONMENTS", "Environment", "Oracle", "StepResult", "TaskSet", "make_env"]

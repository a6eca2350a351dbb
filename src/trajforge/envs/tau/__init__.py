"""tau-style customer-service environments: retail and airline, rebuilt over the
tau-bench databases, with an oracle, cheap snapshots and the bundled tasks."""

from trajforge.envs.tau.db import TauDB
from trajforge.envs.tau.domains import TauAirlineEnv, TauRetailEnv
from trajforge.envs.tau.env import TauEnv, TauEnvConfig, TauState
from trajforge.envs.tau.tasks import TauTaskSet, bundled_tasks

TAU_ENVIRONMENTS = {"tau-retail": TauRetailEnv, "tau-airline": TauAirlineEnv}

__all__ = [
    "TAU_ENVIRONMENTS",
    "TauAirlineEnv",
    "TauDB",
    "TauEnv",
    "TauEnvConfig",
    "TauRetailEnv",
    "TauState",
    "TauTaskSet",
    "bundled_tasks",
]

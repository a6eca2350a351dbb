"""tau2-bench's retail and airline domains (`tau2-retail`, `tau2-airline`); see env.py."""

from trajforge.envs.tau2.env import Tau2AirlineEnv, Tau2Env, Tau2RetailEnv

__all__ = ["Tau2AirlineEnv", "Tau2Env", "Tau2RetailEnv"]

"""The environment registry: names to classes (any `module:Class` path works too)."""

from trajforge.registry import Registry

ENVIRONMENTS: Registry[type] = Registry("environment")
ENVIRONMENTS.register("tau-retail", "trajforge.envs.tau.domains:TauRetailEnv")
ENVIRONMENTS.register("tau-airline", "trajforge.envs.tau.domains:TauAirlineEnv")
ENVIRONMENTS.register("tau2-retail", "trajforge.envs.tau2:Tau2RetailEnv")
ENVIRONMENTS.register("tau2-airline", "trajforge.envs.tau2:Tau2AirlineEnv")
ENVIRONMENTS.register("household", "trajforge.envs.household:HouseholdEnv")
ENVIRONMENTS.register("swe", "trajforge.envs.swe:SweEnv")
ENVIRONMENTS.register("swe-bench", "trajforge.envs.swe_bench:SweBenchEnv")

"""SWE-bench: real repositories rebuilt without Docker, run in the sandbox, judged as the
harness judges (see README.md)."""

from trajforge.envs.swe_bench.build import BuildError, EnvSpec, ensure_env, spec_for
from trajforge.envs.swe_bench.env import SweBenchConfig, SweBenchEnv, bash_call, task_for
from trajforge.envs.swe_bench.instances import (
    Instance,
    get_instance,
    load_instances,
    select_instances,
)
from trajforge.envs.swe_bench.judge import JudgeReport, judge_patch

__all__ = [
    "BuildError",
    "EnvSpec",
    "Instance",
    "JudgeReport",
    "SweBenchConfig",
    "SweBenchEnv",
    "bash_call",
    "ensure_env",
    "get_instance",
    "judge_patch",
    "load_instances",
    "select_instances",
    "spec_for",
    "task_for",
]

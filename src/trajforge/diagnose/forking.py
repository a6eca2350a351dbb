"""Where diagnosis meets the environments: tool schemas, forkability, fork verification.

A run is forkable when its environment is registered and can rebuild the run's state by
replaying its tool calls.
"""

from __future__ import annotations

from typing import Any

from trajforge.diagnose.model import Diagnosis, Verification
from trajforge.schema import Trajectory


def tool_schemas(traj: Trajectory) -> list[dict[str, Any]]:
    """The tool schemas offered in the run (recorded, else the environment's)."""
    return traj.tools


def forkable(traj: Trajectory) -> bool:
    """Whether the run's environment can rebuild its states by replay."""
    return False


def verify_by_fork(traj: Trajectory, diagnosis: Diagnosis) -> Verification:
    """Fork at the decisive step with the correction and let the expert finish."""
    return Verification(method="none", verified=False, detail="no forkable environment")

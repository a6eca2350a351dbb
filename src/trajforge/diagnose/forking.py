"""Where diagnosis meets the environments: tool schemas, forkability, fork verification.

A run is forkable when its environment is registered, can rebuild the run's states by
replaying its tool calls, and has an oracle (so the expert can continue a fork).

Fork verification: fork at the decisive step (keep the messages before it), send the
proposed correction instead of the decisive message, and let the expert continue; the
correction is verified when the fork succeeds. When the first proposal fails and the oracle's
action in that state differs from it, that action is tried as a second proposal; the
diagnosis records whether the first proposal passed (`details["first_proposal_verified"]`).
"""

from __future__ import annotations

from typing import Any

from trajforge.diagnose.evidence import canonical_arguments
from trajforge.diagnose.model import Correction, Diagnosis, Verification
from trajforge.errors import UserError
from trajforge.schema import Trajectory


def tool_schemas(traj: Trajectory) -> list[dict[str, Any]]:
    """The tool schemas offered in the run (recorded, else the environment's)."""
    if traj.tools:
        return traj.tools
    from trajforge.envs import make_env

    try:
        return make_env(traj).tools
    except UserError:
        return []


def forkable(traj: Trajectory) -> bool:
    """Whether the run's environment can rebuild its states by replay and has an oracle."""
    from trajforge.diagnose.counterfactual import check_forkable

    try:
        check_forkable(traj)
    except UserError:
        return False
    return True


def _try(traj: Trajectory, diagnosis: Diagnosis, env) -> tuple[bool, str]:
    from trajforge.diagnose.counterfactual import continue_from

    assert diagnosis.correction is not None and diagnosis.step is not None
    fork = continue_from(env, traj, diagnosis.step, diagnosis.correction.as_message())
    outcome = fork.outcome
    detail = (
        f"fork at message {diagnosis.step} with the correction, expert continues: "
        f"{'success' if outcome.success else 'failure'} after {len(fork.messages)} messages "
        f"(reward {outcome.reward}, ended: {outcome.termination_reason})"
    )
    return bool(outcome.success), detail


def verify_by_fork(traj: Trajectory, diagnosis: Diagnosis) -> Verification:
    """See module docstring. May replace `diagnosis.correction` with the second proposal."""
    from trajforge.diagnose.counterfactual import (
        check_forkable,
        correction_from,
        expert_action_before,
    )

    env = check_forkable(traj)
    if diagnosis.correction is None or diagnosis.step is None:
        diagnosis.details["first_proposal_verified"] = False
        return Verification(method="fork", verified=False, detail="no correction to try")
    passed, detail = _try(traj, diagnosis, env)
    diagnosis.details["first_proposal_verified"] = passed
    if passed:
        return Verification(method="fork", verified=True, detail=detail)
    second = correction_from(expert_action_before(env, traj, diagnosis.step))
    if second is None or _same_action(second, diagnosis.correction):
        return Verification(method="fork", verified=False, detail=detail)
    first = diagnosis.correction
    diagnosis.correction = second
    passed, second_detail = _try(traj, diagnosis, env)
    if not passed:
        diagnosis.correction = first
    diagnosis.details["proposals"] = 2
    return Verification(
        method="fork", verified=passed, detail=f"first proposal: {detail}; oracle: {second_detail}"
    )


def _same_action(a: Correction, b: Correction) -> bool:
    if a.tool_call is None or b.tool_call is None:
        return a.tool_call is b.tool_call and a.message == b.message
    same_args = canonical_arguments(a.tool_call.arguments) == canonical_arguments(
        b.tool_call.arguments
    )
    return a.tool_call.name == b.tool_call.name and same_args

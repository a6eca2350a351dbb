"""Label a recorded proxy session afterwards: how it ended (`trajforge outcome`)."""

from __future__ import annotations

from trajforge.errors import UserError
from trajforge.proxy.session import trajectory_id
from trajforge.schema import Trajectory, compact_llm_calls
from trajforge.store import Store


def session_trajectory(store: Store, session: str) -> Trajectory:
    """The trajectory of a recorded proxy session, by session name or trajectory id."""
    traj_id = trajectory_id(session)
    if store.outcome(traj_id) is None:
        try:
            traj_id = store.resolve_id(session)
        except UserError:
            raise UserError(
                f"no proxy session '{session}' in {store.path} (a session is named by the "
                "proxy URL /s/NAME/v1 or the X-Trajforge-Session header; "
                "`trajforge ls --harness proxy` lists the recorded ones)"
            ) from None
    traj = store.get(traj_id)
    if traj.source.format != "proxy":
        raise UserError(f"{traj_id} is not a proxy session (it came from {traj.source.format})")
    return traj


def set_session_outcome(
    store: Store, session: str, success: bool, reward: float | None, judged_by: str
) -> Trajectory:
    """Record how a proxy session ended, keeping its termination reason and details; a
    running proxy keeps this outcome when the session goes on. Returns the stored run."""
    with store.transaction():
        traj = session_trajectory(store, session)
        outcome = traj.outcome.model_copy(
            update={"success": success, "reward": reward, "judged_by": judged_by}
        )
        labelled = traj.model_copy(update={"outcome": outcome})
        compact = compact_llm_calls(traj.llm_calls)
        store.put(labelled.model_copy(update={"llm_calls": compact}))
    return labelled

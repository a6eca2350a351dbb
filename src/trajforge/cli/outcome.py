"""`trajforge outcome`: label how a recorded proxy session ended."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from trajforge.cli.common import DbOption, JsonOption, console, open_store, print_json

Verdict = Literal["success", "failure"]


def outcome_command(
    session: Annotated[str, typer.Argument(help="Session name (or its trajectory id).")],
    verdict: Annotated[Verdict, typer.Argument(help="success or failure.")],
    reward: Annotated[
        float | None, typer.Option("--reward", help="Scalar reward (for RL export).")
    ] = None,
    judged_by: Annotated[
        str, typer.Option("--judged-by", help="Who or what judged the session.")
    ] = "manual",
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Set the outcome of a session recorded through `trajforge proxy`."""
    from trajforge.proxy.outcomes import set_session_outcome

    with open_store(db) as store:
        traj = set_session_outcome(store, session, verdict == "success", reward, judged_by)
    if json_out:
        print_json({"trajectory_id": traj.id, "outcome": traj.outcome.model_dump()})
        return
    reward_text = "" if reward is None else f" · reward {reward:g}"
    console.print(f"{traj.task.id}: {verdict}{reward_text} (trajectory {traj.id})", highlight=False)

"""`trajforge capture`: run a Python harness in this process and record its model calls."""

from __future__ import annotations

from typing import Annotated

import typer

from trajforge.cli.common import DbOption
from trajforge.store import default_db_path


def capture_command(
    command: Annotated[
        list[str], typer.Argument(help="The Python program and its arguments, after --.")
    ],
    db: DbOption = None,
    session: Annotated[
        str, typer.Option("--session", help="Session name: the run's trajectory.")
    ] = "default",
    harness: Annotated[
        str, typer.Option("--harness", help="Source harness written on the trajectory.")
    ] = "inprocess",
) -> None:
    """Run a Python harness unchanged, recording its model calls without a proxy hop.

    The program (a console script such as mini-swe-agent's `mini`, or a .py file) runs in
    this interpreter; every OpenAI-style completion call it sends through httpx is recorded
    as `trajforge proxy` would record it. Example:
    trajforge capture --db runs.db --session run-1 -- mini --model openai/m --task "..."
    """
    from trajforge.proxy.launch import run_captured

    status = run_captured(command, db or default_db_path(), session, harness=harness)
    raise typer.Exit(status)

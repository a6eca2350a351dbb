"""The `trajforge` command line: one module per command group, registered here by name.

A command's module is imported only when that command runs (see `trajforge.cli.lazy`), so
start-up stays short for quick commands such as `ls` and `show`.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from trajforge.cli.lazy import LazyGroup

COMMANDS = {
    "import": "trajforge.cli.importing:import_command",
    "ls": "trajforge.cli.browse:ls_command",
    "show": "trajforge.cli.browse:show_command",
    "set": "trajforge.cli.metadata:set_command",
    "stats": "trajforge.cli.report:stats_command",
    "export": "trajforge.cli.report:export_command",
    "formats": "trajforge.cli.formats:formats_command",
    "schema": "trajforge.cli.report:schema_command",
    "mock-server": "trajforge.cli.proxy:mock_server_command",
    "proxy": "trajforge.cli.proxy:proxy_command",
    "capture": "trajforge.cli.capture:capture_command",
    "outcome": "trajforge.cli.outcome:outcome_command",
    "diagnose": "trajforge.cli.diagnose:app",
    "monitor": "trajforge.cli.monitor:app",
    "rollout": "trajforge.cli.rollout:rollout_command",
    "replay": "trajforge.cli.envs:replay_command",
    "fork": "trajforge.cli.envs:fork_command",
    "handoff": "trajforge.cli.envs:handoff_command",
    "rft": "trajforge.cli.rollout:rft_command",
    "robustness": "trajforge.cli.rollout:robustness_command",
    "recover": "trajforge.cli.recover:recover_command",
    "ui": "trajforge.cli.ui:ui_command",
    "train": "trajforge.cli.rl:train_app",
    "serve": "trajforge.cli.learn:serve_command",
    "eval": "trajforge.cli.learn:eval_command",
    "swe": "trajforge.cli.swe:app",
    "strategies": "trajforge.cli.strategies:app",
}


class TrajforgeCommands(LazyGroup):
    lazy_commands = COMMANDS


app = typer.Typer(
    name="trajforge",
    cls=TrajforgeCommands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


PIPED_WIDTH = 160
"""Columns for help and tables when output is not a terminal (rich would assume 80 and cut)."""


def _wide_when_piped() -> None:
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        os.environ["COLUMNS"] = str(PIPED_WIDTH)


_wide_when_piped()


def _print_version(value: bool) -> None:
    if value:
        from trajforge.version import __version__

        typer.echo(f"trajforge {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Import, fork, diagnose and learn from LLM-agent trajectories."""


if __name__ == "__main__":
    app()

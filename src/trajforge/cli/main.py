"""The `trajforge` command line: one module per command group, registered here by name.

A command's module is imported only when that command runs (see `trajforge.cli.lazy`), so
start-up stays short for quick commands such as `ls` and `show`.
"""

from __future__ import annotations

import typer

from trajforge.cli.lazy import LazyGroup

COMMANDS = {
    "import": "trajforge.cli.importing:import_command",
    "ls": "trajforge.cli.browse:ls_command",
    "show": "trajforge.cli.browse:show_command",
    "stats": "trajforge.cli.report:stats_command",
    "export": "trajforge.cli.report:export_command",
    "schema": "trajforge.cli.report:schema_command",
    "mock-server": "trajforge.cli.proxy:mock_server_command",
    "proxy": "trajforge.cli.proxy:proxy_command",
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
    "train": "trajforge.cli.learn:train_app",
    "serve": "trajforge.cli.learn:serve_command",
    "eval": "trajforge.cli.learn:eval_command",
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


@app.callback()
def main() -> None:
    """Import, fork, diagnose and learn from LLM-agent trajectories."""


if __name__ == "__main__":
    app()

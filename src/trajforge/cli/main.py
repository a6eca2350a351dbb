"""The `trajforge` command line: one module per command group, registered here."""

from __future__ import annotations

import typer

from trajforge.cli import browse, importing, report
from trajforge.cli import diagnose as diagnose_cli
from trajforge.cli import envs as envs_cli
from trajforge.cli import monitor as monitor_cli
from trajforge.cli import proxy as proxy_cli
from trajforge.cli import recover as recover_cli
from trajforge.cli import rollout as rollout_cli
from trajforge.cli.common import guarded

app = typer.Typer(
    name="trajforge",
    help="Import, fork, diagnose and learn from LLM-agent trajectories.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

app.command("import")(guarded(importing.import_command))
app.command("ls")(guarded(browse.ls_command))
app.command("show")(guarded(browse.show_command))
app.command("stats")(guarded(report.stats_command))
app.command("export")(guarded(report.export_command))
app.command("schema")(guarded(report.schema_command))
app.command("mock-server")(guarded(proxy_cli.mock_server_command))
app.command("proxy")(guarded(proxy_cli.proxy_command))
app.add_typer(diagnose_cli.app, name="diagnose")
app.add_typer(monitor_cli.app, name="monitor")
app.command("rollout")(guarded(rollout_cli.rollout_command))
app.command("replay")(guarded(envs_cli.replay_command))
app.command("fork")(guarded(envs_cli.fork_command))
app.command("handoff")(guarded(envs_cli.handoff_command))
app.command("rft")(guarded(rollout_cli.rft_command))
app.command("robustness")(guarded(rollout_cli.robustness_command))
app.command("recover")(guarded(recover_cli.recover_command))


if __name__ == "__main__":
    app()

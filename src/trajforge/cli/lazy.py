"""A command group that imports a command's module only when that command runs.

`trajforge ls` should not pay for loading the proxy server, the monitor's numerics or the
rollout machinery: each command is named by a dotted path and loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar

import typer
from typer.core import TyperGroup

from trajforge.cli.common import guarded

if TYPE_CHECKING:  # typer builds on its own copy of click; these are its classes
    from typer._click import Command, Context


def load_command(name: str, target: str) -> Command:
    """The click command for `target`: "module:function" (a command) or "module:app" (a group)."""
    module_name, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module_name), attr)
    if isinstance(value, typer.Typer):
        command: Command = typer.main.get_group(value)
    else:
        single = typer.Typer()
        single.command(name)(guarded(value))
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """A `TyperGroup` whose commands come from `lazy_commands` (name → dotted path)."""

    lazy_commands: ClassVar[dict[str, str]] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *self.lazy_commands]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self.commands[cmd_name] = load_command(cmd_name, self.lazy_commands[cmd_name])
        return super().get_command(ctx, cmd_name)

"""A click group whose commands are imported only when one is run (click's documented LazyGroup pattern).

``freshet --help`` lists every command from the short help kept beside its import path, without importing
the command modules (which load Kafka clients, the broker, Spark): only the command that runs is imported.
"""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """``commands``: command name -> ("package.module:attribute", short help). The short help is what the
    command's own docstring starts with (a test keeps the two equal)."""

    def __init__(self, *args, lazy_commands: dict[str, tuple[str, str]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            self.add_command(self.load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def load(self, cmd_name: str) -> click.Command:
        """Import the command ``cmd_name`` names."""
        module_name, _, attribute = self.lazy_commands[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, with a command not yet imported described by its short help from the map."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=self.lazy_commands[name][1])
            if not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in rows])

"""The freshet command starts without importing what it does not run: ``--help`` lists every command from the
map in ``freshet.cli.main`` (no command module imported), a client command imports its own module and the
Kafka client, never the broker, kio or Spark. (What it costs in seconds: benchmarks/cli_startup.py.)"""

import subprocess
import sys
from unittest import mock

import click
import pytest

from freshet.cli.lazy import LazyGroup
from freshet.cli.main import COMMANDS, cli
from freshet.testing.cli import freshet

HEAVY = ("kio", "hypothesis", "pyspark", "freshet.broker", "freshet.log")


def imported_after(code: str) -> set[str]:
    """The top-level names of the modules (and freshet's subpackages) loaded once ``code`` has run in a fresh
    interpreter."""
    probe = code + "\nimport sys\nprint('\\n'.join(sys.modules))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    names = set()
    for module in run.stdout.split():
        parts = module.split(".")
        names.add(parts[0])
        if parts[0] == "freshet" and len(parts) > 1:
            names.add(".".join(parts[:2]))
    return names


def test_importing_the_command_loads_no_command_module():
    loaded = imported_after("import freshet.cli.main")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)
    assert "confluent_kafka" not in loaded and "rich" not in loaded and "freshet.client" not in loaded


def test_help_lists_every_command_with_its_short_help_without_importing_them():
    loaded = imported_after("from freshet.cli.main import cli\n"
                            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass")
    assert not loaded & {*HEAVY, "confluent_kafka", "rich", "freshet.client"}

    shown = freshet("--help", env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("Commands:", 1)[1]
    rows = dict(line.strip().split(None, 1) for line in listed.strip().splitlines() if not line.startswith("    "))
    assert sorted(rows) == sorted(COMMANDS)
    for name, (_, short_help) in COMMANDS.items():
        assert short_help.startswith(rows[name].removesuffix("...")), (name, rows[name])

    demos = freshet("demo", "--help")
    assert demos.returncode == 0, demos.stderr
    for name in ("access-logs", "alerts", "dual-writes", "enrollment", "ingest", "intrusion", "redelivery", "sql"):
        assert f"\n  {name} " in demos.stdout


def _lazy_commands(group: LazyGroup, path: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield path + (name,), group.lazy_commands.get(name, (None, None))[1], command
        if isinstance(command, LazyGroup):
            yield from _lazy_commands(command, path + (name,))


def test_the_maps_short_help_is_the_commands_own():
    """Each entry's short help is the first sentence of the command's docstring: --help shows what the command
    itself says once imported (a docstring changed without the map fails here)."""
    seen = 0
    for path, short_help, command in _lazy_commands(cli):
        assert command is not None, path
        if short_help is not None:
            assert short_help == command.get_short_help_str(limit=10_000), path
            seen += 1
    assert seen == len(COMMANDS) + 8  # and the eight demos


def test_an_unknown_command_is_refused_in_one_line():
    r = freshet("topics", "list")
    assert (r.returncode, r.stderr) == (1, "freshet: no such command 'topics' (see freshet --help)\n")


@pytest.mark.parametrize("args, line", [
    (["topic", "create"], "freshet topic create: missing argument 'NAME' (see freshet topic create --help)"),
    (["topic", "create", "t", "--partitions", "x"],
     "freshet topic create: invalid value for '--partitions' / '-p': 'x' is not a valid integer "
     "(see freshet topic create --help)"),
    (["topic", "nosuch"], "freshet topic: no such command 'nosuch' (see freshet topic --help)"),
    (["--bogus"], "freshet: no such option '--bogus' (see freshet --help)"),
], ids=["missing-argument", "bad-value", "unknown-subcommand", "unknown-option"])
def test_a_usage_error_is_one_line_and_exit_1(args, line, capsys):
    from freshet.cli.main import main

    with pytest.raises(SystemExit) as exited:
        with mock.patch("sys.argv", ["freshet", *args]):
            main()
    assert exited.value.code == 1
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("args", [
    ["topic", "list"],
    ["watch", "list"],
    ["groups", "list"],
])
def test_a_client_command_imports_no_broker_kio_or_spark(broker, args):
    loaded = imported_after("from freshet.cli.main import cli\n"
                            f"try:\n    cli({args + ['--bootstrap', broker.bootstrap]!r})\n"
                            "except SystemExit as exit:\n    assert exit.code == 0, exit.code")
    assert "confluent_kafka" in loaded  # it did run, as a Kafka client
    assert not loaded & set(HEAVY), loaded & set(HEAVY)

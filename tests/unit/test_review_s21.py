"""Review of session 21's work outside the broker and SQL: the CLI's usage errors, the CEP routing on Spark. Each
test states the behaviour a user expects; an xfail (strict) one fails until the code does it."""

from __future__ import annotations

import json
from unittest import mock

import pytest


@pytest.mark.parametrize("args, usage", [([], "Usage: freshet [OPTIONS] COMMAND [ARGS]..."),
                                         (["topic"], "Usage: freshet topic [OPTIONS] COMMAND [ARGS]...")])
def test_a_group_run_without_a_command_shows_its_help_as_it_is(args, usage, capsys):
    """``freshet`` (or ``freshet topic``) with no command prints the group's help, as click and every CLI do, and exits
    1 as the other usage errors now do; 3c47fbb turned the whole help into one "usage error" line: "freshet: usage:
    Usage: ..." with " (see freshet --help)" glued to the last command's description."""
    from freshet.cli.main import main

    with pytest.raises(SystemExit) as exited:
        with mock.patch("sys.argv", ["freshet", *args]):
            main()
    assert exited.value.code == 1
    out = capsys.readouterr()
    shown = out.out + out.err
    assert shown.startswith(usage), shown[:200]
    assert "--help)" not in shown and "Commands:" in shown

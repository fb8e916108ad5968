"""The ``freshet`` command run as a user types it, for tests and benchmarks: one helper for every test module.

    r = freshet(broker, "topic", "create", name)            # against this broker: --bootstrap appended
    r = freshet("security", "init", "--dir", d, env={...})  # a command without a broker
    assert r.returncode == 0, r.stderr

``freshet_argv(...)`` is the argument list itself, for a process a test starts and stops (``subprocess.Popen``).
"""

from __future__ import annotations

import os
import subprocess
import sys


def freshet_argv(*args) -> list[str]:
    """``freshet ARGS`` as a process argument list (this interpreter, so this checkout's freshet)."""
    return [sys.executable, "-m", "freshet.cli.main", *map(str, args)]


def freshet(*args, input: str | None = None, env: dict | None = None, timeout: float = 300,
            bootstrap: bool = True) -> subprocess.CompletedProcess:
    """Run ``freshet ARGS`` to its end: exit status, standard output and standard error as text.

    A broker first (anything with a ``bootstrap`` address, such as :class:`freshet.local.BrokerProcess`): the
    command runs against it (``--bootstrap ADDRESS`` appended; ``bootstrap=False`` leaves it off). ``input``
    goes to standard input; ``env`` is added to this process's environment; ``timeout`` raises
    ``subprocess.TimeoutExpired`` (a hung command fails its test instead of hanging it)."""
    extra: list[str] = []
    if args and hasattr(args[0], "bootstrap"):
        broker, *args = args
        if bootstrap:
            extra = ["--bootstrap", broker.bootstrap]
    return subprocess.run(freshet_argv(*args, *extra), input=input, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env} if env else None, check=False)


def one_line_error(run: subprocess.CompletedProcess, *fragments: str) -> str:
    """Assert that the command failed as a bad input must: exit 1, one line ``error: ...`` on standard error
    holding each of ``fragments``. Returns the line."""
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]

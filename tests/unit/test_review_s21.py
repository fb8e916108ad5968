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


@pytest.mark.parametrize("columns", [True, False], ids=["column-routing", "event-by-event"])
def test_one_event_with_a_time_out_of_range_does_not_stop_the_cep_routing(columns):
    """``freshet run cep``: one event whose ORDER BY time is an integer beyond what a timestamp holds (9.2e15 ms, a
    producer's bug or a time in nanoseconds) raised ArrowInvalid in the routing step (the cast of the pack's newest
    time to timestamp[us]) on both routings: the Spark task fails, its retries read the same record, the query
    dies on it. A record that cannot be read is skipped, as the routing skips one that is not JSON; the chunk's
    other events are routed."""
    import pyarrow as pa

    from freshet.pipelines import cep_columns
    from freshet.pipelines.cep import FixedRules, _Compiled, _router

    rules = FixedRules(["RULE logins WHERE kind = 'login' PARTITION BY user PATTERN (A)"])
    values = [json.dumps({"kind": "login", "user": "ann", "event_time": 1_000}),
              json.dumps({"kind": "login", "user": "bob", "event_time": 2**63 - 1}),
              json.dumps({"kind": "login", "user": "cyd", "event_time": 3_000})]
    batch = pa.RecordBatch.from_pydict({"value": pa.array(values, pa.string()), "topic": ["t"] * 3,
                                        "partition": pa.array([0] * 3, pa.int32()),
                                        "offset": pa.array(range(3), pa.int64())})
    plan = cep_columns.column_routing(_Compiled.router(rules))
    plan.ok, plan.failures = columns and plan.ok, 0
    out = pa.Table.from_batches(list(_router(rules)(iter([batch])))).to_pylist()
    routed = [row for row in out if row["rule"] == "logins"]
    users = sorted(json.loads(e)["user"] for row in routed for e in row["events"].split("\n"))
    assert users == ["ann", "cyd"]

"""``freshet demo dual-writes``: two writers keep a database and a search index; with dual writes the two
end up disagreeing, through change data capture the index follows the database's commit order."""

from __future__ import annotations

import os

import click


@click.command("dual-writes")
@click.option("--keys", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1), help="Times each writer sets every key.")
def dual_writes_demo(keys: int, rounds: int) -> None:
    """Two writers, dual writes vs change data capture: which index ends up agreeing with the database?"""
    import tempfile

    from rich.console import Console

    from freshet.cdc.dual_writes import dual_writes, through_cdc
    from freshet.local import BrokerProcess, PostgresServer

    console = Console()
    with tempfile.TemporaryDirectory(prefix="freshet-dual-") as tmp, PostgresServer() as pg, \
            BrokerProcess(data_dir=os.path.join(tmp, "log")) as broker:
        console.print(f"PostgreSQL on 127.0.0.1:{pg.port} (wal_level=logical), broker on {broker.bootstrap}")
        console.print(f"two writers set the same {keys} keys side by side, {rounds} times; "
                      "a dual write is: database, then index")
        dual = dual_writes(pg.dsn, keys, rounds)
        line = f"[bold]dual writes[/]: {dual.disagreements} of {dual.keys} keys disagree between database and index"
        if dual.example:
            k, db_value, index_value = dual.example
            line += f" (e.g. {k}: database {db_value!r}, index {index_value!r})"
        console.print(line)
        cdc = through_cdc(pg.dsn, broker.bootstrap, os.path.join(tmp, "index.db"), keys, rounds)
        console.print(f"[bold]through CDC[/]: {cdc.disagreements} of {cdc.keys} keys disagree "
                      "(the index follows the database's commit order from its replication log)")

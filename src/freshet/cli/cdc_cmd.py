"""``freshet cdc postgres`` and ``freshet cdc status``."""

from __future__ import annotations

import logging
import signal
import sys

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from .common import bootstrap_option, one_line_errors


@click.group()
def cdc() -> None:
    """Change data capture: databases as streams."""


@cdc.command("postgres")
@click.option("--dsn", required=True, envvar="FRESHET_PG_DSN", help="PostgreSQL DSN (wal_level=logical).")
@click.option("--tables", required=True, help="Comma-separated schema.table list.")
@click.option("--topic-prefix", default="pg", show_default=True, help="Topics are PREFIX.schema.table.")
@click.option("--slot", default="freshet", show_default=True, help="Replication slot name.")
@click.option("--publication", default="freshet_pub", show_default=True)
@bootstrap_option
@one_line_errors
def postgres(dsn: str, tables: str, topic_prefix: str, slot: str, publication: str, bootstrap: str) -> None:
    """Snapshot TABLES, then stream their changes, into compacted topics (Debezium JSON envelope)."""
    import psycopg2

    from freshet.cdc.postgres import CdcConfig, CdcError, PostgresConnector

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(stderr=True)
    names = [t.strip() if "." in t else f"public.{t.strip()}" for t in tables.split(",") if t.strip()]
    progress = Progress(TextColumn("snapshot {task.description}"), BarColumn(), MofNCompleteColumn(),
                        console=console, transient=False)
    tasks: dict[str, int] = {}

    def on_progress(table: str, done: int, total: int) -> None:
        if table not in tasks:
            tasks[table] = progress.add_task(table, total=max(total, 1))
        progress.update(tasks[table], completed=done)

    connector = PostgresConnector(CdcConfig(dsn, names, topic_prefix, bootstrap, slot, publication), on_progress)
    signal.signal(signal.SIGTERM, lambda *_: connector.stop())
    try:
        with progress:
            connector.run()
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except psycopg2.Error as exc:
        click.echo(f"error: PostgreSQL: {str(exc).strip().splitlines()[0]}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        connector.stop()
    s = connector.stats
    click.echo(f"stopped: {s.snapshot_rows} snapshot rows, {s.changes} changes in {s.transactions} transactions",
               err=True)


@cdc.command("status")
@click.option("--dsn", required=True, envvar="FRESHET_PG_DSN")
@click.option("--slot", default="freshet", show_default=True)
@one_line_errors
def status(dsn: str, slot: str) -> None:
    """How far the connector's replication slot is behind the database."""
    import psycopg2

    from freshet.cdc.postgres import slot_status

    try:
        info = slot_status(dsn, slot)
    except psycopg2.Error as exc:
        click.echo(f"error: PostgreSQL: {str(exc).strip().splitlines()[0]}", err=True)
        sys.exit(1)
    if info is None:
        click.echo(f"error: no replication slot {slot!r}", err=True)
        sys.exit(1)
    behind = info["since_last_reply_s"]
    click.echo(f"slot {slot}: {'active' if info['active'] else 'inactive'}, confirmed {info['confirmed_flush_lsn']}, "
               f"current {info['current_lsn']}, lag {info['lag_bytes']} bytes"
               + (f", last acknowledgement {behind:.1f} s ago" if behind is not None else ""))

"""``freshet cdc postgres`` and ``freshet cdc status``."""

from __future__ import annotations

import logging
import signal
import sys
import time

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


def _follow(sync, follow: bool, interval: float) -> int:
    total = sync()
    while follow:
        time.sleep(interval)
        total += sync()
    return total


@cdc.command("index")
@click.option("--topic", required=True, help="A change topic (PREFIX.schema.table).")
@click.option("--columns", required=True, help="Comma-separated text columns to index.")
@click.option("--db", "db_path", default="search-index.db", show_default=True, help="SQLite file.")
@click.option("--follow", is_flag=True, help="Keep the index in sync until stopped.")
@bootstrap_option
@one_line_errors
def index(topic: str, columns: str, db_path: str, follow: bool, bootstrap: str) -> None:
    """Keep a full-text search index (SQLite FTS5) in sync with a change topic."""
    from freshet.cdc.derived import SearchIndex

    search_index = SearchIndex(db_path, topic, [c.strip() for c in columns.split(",") if c.strip()])
    try:
        applied = _follow(lambda: search_index.sync(bootstrap), follow, 0.5)
    except KeyboardInterrupt:
        return
    click.echo(f"applied {applied} changes; {len(search_index.table())} rows indexed in {db_path}", err=True)


@cdc.command("cache")
@click.option("--topic", required=True, help="A change topic (PREFIX.schema.table).")
@click.option("--redis", "redis_url", default="redis://127.0.0.1:6379/0", show_default=True)
@click.option("--follow", is_flag=True, help="Keep the cache in sync until stopped.")
@bootstrap_option
@one_line_errors
def cache(topic: str, redis_url: str, follow: bool, bootstrap: str) -> None:
    """Keep a Redis cache (latest row per key; deletes evict) in sync with a change topic."""
    import redis

    from freshet.cdc.derived import Cache

    try:
        target = Cache(redis_url, topic)
        applied = _follow(lambda: target.sync(bootstrap), follow, 0.5)
    except redis.RedisError as exc:
        click.echo(f"error: Redis at {redis_url}: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        return
    click.echo(f"applied {applied} changes to {redis_url}", err=True)


@cdc.command("warehouse")
@click.option("--topics", required=True, help="Comma-separated change topics.")
@click.option("--path", default="warehouse", show_default=True, help="Parquet directory (one folder per topic).")
@click.option("--checkpoint", default="checkpoints/warehouse", show_default=True)
@click.option("--available-now", is_flag=True, help="Write what is there, then stop.")
@bootstrap_option
def warehouse(topics: str, path: str, checkpoint: str, available_now: bool, bootstrap: str) -> None:
    """Write change topics into a Parquet warehouse with Spark (query it with DuckDB)."""
    from freshet.pipelines.warehouse import start
    from freshet.spark import session
    from freshet.spark.session import stop_gracefully

    spark = session("freshet-warehouse")
    query = start(spark, bootstrap, [t.strip() for t in topics.split(",") if t.strip()], path, checkpoint,
                  available_now)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        stop_gracefully([query])
    if query.exception() is not None:
        click.echo(f"error: warehouse failed: {str(query.exception()).splitlines()[0]}", err=True)
        sys.exit(1)
    click.echo(f"warehouse at {path}: read it with DuckDB, e.g. read_parquet('{path}/topic=*/*.parquet')", err=True)


@click.command()
@click.argument("query")
@click.option("--db", "db_path", default="search-index.db", show_default=True)
@click.option("--limit", default=20, show_default=True)
def search(query: str, db_path: str, limit: int) -> None:
    """Full-text QUERY (FTS5 syntax) over an index kept by `freshet cdc index`; one JSON row per line."""
    import json
    import os
    import sqlite3

    from freshet.cdc.derived import SearchIndex

    if not os.path.exists(db_path):
        click.echo(f"error: no search index at {db_path} (build one with freshet cdc index)", err=True)
        sys.exit(1)
    try:
        for row in SearchIndex(db_path, "", []).search(query, limit):
            click.echo(json.dumps(row, default=str))
    except sqlite3.OperationalError as exc:
        click.echo(f"error: bad search query {query!r}: {exc}", err=True)
        sys.exit(1)

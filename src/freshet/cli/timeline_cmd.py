"""``freshet timeline USER``: a home timeline, read from the view ``freshet run timeline`` maintains."""

from __future__ import annotations

import sys

import click


@click.command()
@click.argument("user")
@click.option("--pg-dsn", envvar="FRESHET_PG_DSN", required=True, help="PostgreSQL DSN (env FRESHET_PG_DSN).")
@click.option("--table", default="home_timeline", show_default=True, help="The view's table (--to postgres:TABLE).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
def timeline(user: str, pg_dsn: str, table: str, limit: int) -> None:
    """USER's home timeline, newest first: the tweets of everyone USER follows."""
    import psycopg2
    import psycopg2.errors

    from freshet.pipelines.timeline import read_timeline

    try:
        rows = read_timeline(pg_dsn, user, table, limit)
    except psycopg2.errors.UndefinedTable:
        click.echo(f"error: no table {table!r}: start `freshet run timeline ... --to postgres:{table}` first", err=True)
        sys.exit(1)
    except psycopg2.OperationalError as exc:
        click.echo(f"error: cannot reach PostgreSQL: {str(exc).strip().splitlines()[0]}", err=True)
        sys.exit(1)
    if not rows:
        click.echo(f"{user}'s timeline is empty", err=True)
    for tweeted_at, author, text, _tweet_id in rows:
        click.echo(f"{tweeted_at:%Y-%m-%d %H:%M:%S}  @{author}: {text}")

"""Reading PostgreSQL in tests (psycopg2, the project's one PostgreSQL driver)."""

from __future__ import annotations

from freshet.client.postgres import connection


def rows(dsn: str, sql: str, params: tuple | None = None, session: tuple[str, ...] = ()) -> list[tuple]:
    """Every row ``sql`` returns, after the ``session`` statements (``SET TIME ZONE ...``) on the same
    connection."""
    with connection(dsn) as conn, conn.cursor() as cur:
        for statement in session:
            cur.execute(statement)
        cur.execute(sql, params)
        return cur.fetchall()


def execute_outside_transaction(dsn: str, sql: str) -> None:
    """A statement PostgreSQL runs only outside a transaction block (CREATE DATABASE)."""
    with connection(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql)

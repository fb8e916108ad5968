"""Reading PostgreSQL in tests (psycopg2, the project's one PostgreSQL driver)."""

from __future__ import annotations

import psycopg2


def rows(dsn: str, sql: str, params: tuple | None = None, session: tuple[str, ...] = ()) -> list[tuple]:
    """Every row ``sql`` returns, after the ``session`` statements (``SET TIME ZONE ...``) on the same
    connection."""
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            for statement in session:
                cur.execute(statement)
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def execute_outside_transaction(dsn: str, sql: str) -> None:
    """A statement PostgreSQL runs only outside a transaction block (CREATE DATABASE)."""
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()

"""Short PostgreSQL connections for the clients that write or read it (the CDC connector, the Spark sinks,
the pipelines, the tests), through psycopg2, the project's one PostgreSQL driver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def connection(dsn: str, autocommit: bool = False) -> Iterator[Any]:
    """A psycopg2 connection whose work is one transaction: committed when the block ends, rolled back if it
    raises; closed either way (psycopg2's own ``with conn`` ends the transaction but keeps the connection
    open until it is collected). ``autocommit``: each statement its own transaction (CREATE DATABASE,
    pg_drop_replication_slot)."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        if autocommit:
            conn.autocommit = True
            yield conn
        else:
            with conn:
                yield conn
    finally:
        conn.close()


def quote_ident(name: str) -> str:
    """An SQL identifier, quoted as PostgreSQL's quote_ident does."""
    return '"' + name.replace('"', '""') + '"'

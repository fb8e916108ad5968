"""``POST /sql`` as JSON lines, in the shape of ksqlDB's ``/query-stream`` where it fits.

The dashboard serves the route (``freshet.dashboard.routers.sql``) and is given a :class:`SqlEndpoint` by the
command that starts it: the dashboard imports no Spark, and this module imports Spark only when the first
statement needs it. Each request runs in a SQL session of its own (its ``properties``, such as
``auto.offset.reset``, are its own), over one SparkSession shared by every request.

Lines, one JSON value each:

- a query (push, pull, batch, SHOW, DESCRIBE, EXPLAIN): a header ``{"queryId": ..., "columnNames": [...],
  "columnTypes": [...]}`` then one JSON array per row (a push query's as they change, until its LIMIT or UNTIL
  or the client going away);
- any other statement: ``{"@type": "currentStatus", "statementText": ..., "commandStatus": {"status":
  "SUCCESS", "message": ...}}``;
- an error: ``{"@type": "statement_error", "error_code": 40001, "message": ..., "line": ..., "column": ...}``,
  the last line (a statement that cannot run stops the script there).
"""

from __future__ import annotations

import datetime
import decimal
import threading
from collections.abc import Callable, Iterator

from .errors import SqlError

BAD_STATEMENT = 40001  # ksqlDB's code for a statement that cannot run


def jsonable(value):
    """A row's value as JSON has it: timestamps as ISO 8601, decimals as numbers, structs as objects."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if hasattr(value, "asDict"):
        return {k: jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def error_line(error: SqlError) -> dict:
    return {"@type": "statement_error", "error_code": BAD_STATEMENT, "message": error.message,
            "line": error.line, "column": error.column}


class SqlEndpoint:
    """What the dashboard calls for ``POST /sql``: ``endpoint(text, properties)`` -> (JSON lines, stop)."""

    def __init__(self, bootstrap: str, master: str | None = None, remote: str | None = None,
                 data_dir: str | None = None) -> None:
        self.bootstrap, self.master, self.remote, self.data_dir = bootstrap, master, remote, data_dir
        self._spark = None
        self._lock = threading.Lock()

    def spark(self):
        """The one SparkSession; when it is first built, the stored persistent queries start again in it."""
        with self._lock:
            if self._spark is None:
                from freshet.spark import session

                from .session import SqlSession

                self._spark = session("freshet-sql-http", master=self.master, remote=self.remote)
                SqlSession(self.bootstrap, self._spark, data_dir=self.data_dir).restore_queries()
            return self._spark

    def __call__(self, text: str, properties: dict | None = None) -> tuple[Iterator[dict], Callable[[], None]]:
        from .session import SqlSession

        session = SqlSession(self.bootstrap, spark_factory=self.spark, data_dir=self.data_dir)
        return lines(session, text, properties or {}), session.close

    def answer_now(self, text: str, properties: dict | None = None) -> list | None:
        """The JSON lines of a pull query of the common shape (``table_store.fast_pull``: one indexed read of the
        copy, no Spark), for the route to answer at once, without a thread of its own; None for anything else
        (then ``self(text, properties)``: the same lines for a pull query, by the general path)."""
        from types import SimpleNamespace

        from .table_store import fast_pull

        if properties:
            return None
        try:
            answer = fast_pull(SimpleNamespace(data_dir=self.data_dir), text)
        except Exception:  # noqa: BLE001 (the copy cannot be read: the general path says so, as it says it)
            return None
        return None if answer is None else list(rows_lines(answer))


def rows_lines(result) -> Iterator:
    """A header, then one JSON array per row, of a query's rows (not a push query's)."""
    yield {"queryId": None, "columnNames": result.columns, "columnTypes": []}
    for row in result.rows:
        yield [jsonable(v) for v in row]


def lines(session, text: str, properties: dict) -> Iterator[dict]:
    """The JSON lines of ``text`` run in ``session`` (closed at the end)."""
    from .results import Message, Push, Rows

    try:
        for key, value in properties.items():
            if key != "auto.offset.reset":
                raise SqlError(f"unknown property {key!r}: auto.offset.reset is the one a request may set")
            if str(value).lower() not in ("earliest", "latest"):
                raise SqlError(f"auto.offset.reset takes 'earliest' or 'latest', got {value!r}")
            session.offset_reset = str(value).lower()
        for result in session.execute(text):
            if isinstance(result, Message):
                yield {"@type": "currentStatus", "statementText": text,
                       "commandStatus": {"status": "SUCCESS", "message": result.text}}
            elif isinstance(result, Push):
                yield {"queryId": result.query_id, "columnNames": result.columns,
                       "columnTypes": result.info.get("types", [])}
                for row in result.rows:
                    yield [jsonable(v) for v in row]
            elif isinstance(result, Rows):
                yield from rows_lines(result)
    except SqlError as e:
        yield error_line(e)
    finally:
        session.close()

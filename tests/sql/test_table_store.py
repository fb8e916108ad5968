"""The queryable copy of a table (SQLite by default, PostgreSQL when configured): rows replace the row of their
key, a reader in another connection sees each committed batch, and a pull query (every key column given a literal)
is answered from it while anything else is left to Spark."""

import datetime
import types

import pytest

from freshet.sql import table_store as ts
from freshet.sql.table_store import TableStore, pull, store_for

MINUTE = datetime.datetime(2026, 1, 1, 0, 1)
COLUMNS = [("minute", "timestamp"), ("url", "string"), ("requests", "bigint"), ("avg_size", "double")]


@pytest.fixture(params=["sqlite", "postgres"])
def session(request, tmp_path):
    """A session-like object whose store is SQLite in tmp_path, or PostgreSQL in a schema of the test's own."""
    if request.param == "sqlite":
        yield types.SimpleNamespace(data_dir=str(tmp_path))
        return
    conn, schema = request.getfixturevalue("db")
    dsn = f"{request.getfixturevalue('postgres').dsn} options=-csearch_path={schema}"
    yield types.SimpleNamespace(data_dir=str(tmp_path), table_store_dsn=dsn)


@pytest.fixture
def store(session):
    store = store_for(session)
    store.define("rpm", COLUMNS, ["minute", "url"])
    store.upsert("rpm", [(MINUTE, "/a", 5, 10.0), (MINUTE, "/b", 7, 12.5)])
    store.upsert("rpm", [(MINUTE, "/a", 9, 11.0)])  # a later batch: /a's new row
    yield store
    store.close()


def test_rows_replace_the_row_of_their_key(store, session):
    assert store.get("rpm", [MINUTE, "/a"]) == (MINUTE, "/a", 9, 11.0)
    assert store.get("RPM", [MINUTE, "/b"]) == (MINUTE, "/b", 7, 12.5)
    assert store.get("rpm", [MINUTE, "/c"]) is None
    assert store.count("rpm") == 2
    # another connection (another process: the CLI, the dashboard) reads what was committed
    other = TableStore(dsn=session.table_store_dsn) if getattr(session, "table_store_dsn", None) \
        else TableStore(path=store.path)
    assert other.get("rpm", [MINUTE, "/a"]) == (MINUTE, "/a", 9, 11.0)
    other.close()


def test_defining_a_table_again_starts_it_empty(store):
    store.define("rpm", COLUMNS, ["minute", "url"])
    assert store.count("rpm") == 0 and store.get("rpm", [MINUTE, "/a"]) is None


@pytest.mark.parametrize("query, columns, rows", [
    ("SELECT * FROM rpm WHERE minute = '2026-01-01 00:01:00' AND url = '/a'",
     ["minute", "url", "requests", "avg_size"], [(MINUTE, "/a", 9, 11.0)]),
    ("select requests AS n, avg_size from RPM where url = '/b' and minute = TIMESTAMP '2026-01-01 00:01:00'",
     ["n", "avg_size"], [(7, 12.5)]),
    ("SELECT requests FROM rpm WHERE (url = '/c') AND minute = '2026-01-01 00:01:00'", ["requests"], []),
    ("SELECT requests FROM rpm WHERE url = '/a' AND minute = '2026-01-01 00:01:00' LIMIT 0", ["requests"], []),
])
def test_a_pull_query_is_answered_from_the_copy(store, session, query, columns, rows):
    assert pull(session, query) == ts.Rows(columns, rows)


@pytest.mark.parametrize("query", [
    "SELECT * FROM rpm WHERE url = '/a'",  # not every key column: a scan, Spark's
    "SELECT * FROM rpm WHERE url = '/a' OR minute = '2026-01-01 00:01:00'",
    "SELECT * FROM rpm WHERE url = upper('/a') AND minute = '2026-01-01 00:01:00'",
    "SELECT requests + 1 FROM rpm WHERE url = '/a' AND minute = '2026-01-01 00:01:00'",
    "SELECT count(*) FROM rpm WHERE url = '/a' AND minute = '2026-01-01 00:01:00'",
    "SELECT * FROM other WHERE url = '/a'",  # not a table with a copy
    "SELECT * FROM rpm",
    "SHOW TABLES",
])
def test_anything_else_is_left_to_spark(store, session, query):
    assert pull(session, query) is None


def test_pull_queries_from_a_thread_each_share_a_few_connections(store, session, monkeypatch):
    """POST /sql answers each request in a thread of its own: its pull query borrows an idle connection rather
    than opening one per request (and leaving it to the garbage collector)."""
    import threading

    opened = []
    real_open = TableStore._open
    monkeypatch.setattr(TableStore, "_open", lambda self: opened.append(1) or real_open(self))
    answers = []
    for _ in range(30):
        asking = threading.Thread(target=lambda: answers.append(
            pull(session, "SELECT requests FROM rpm WHERE url = '/a' AND minute = '2026-01-01 00:01:00'")))
        asking.start()
        asking.join()
    assert answers == [ts.Rows(["requests"], [(9,)])] * 30
    assert len(opened) <= 1


def test_a_table_dropped_or_declared_again_elsewhere_is_seen_at_once(store, session):
    """Another process (another store object on the same copy) drops the table or declares it anew: this one's
    pull queries follow at once (no stale columns or rows)."""
    other = TableStore(dsn=session.table_store_dsn) if getattr(session, "table_store_dsn", None) \
        else TableStore(path=store.path)
    query = "SELECT * FROM rpm WHERE minute = '2026-01-01 00:01:00' AND url = '/a'"
    assert pull(session, query).rows == [(MINUTE, "/a", 9, 11.0)]
    other.define("rpm", [("minute", "timestamp"), ("url", "string"), ("hits", "bigint")], ["minute", "url"])
    other.upsert("rpm", [(MINUTE, "/a", 3)])
    assert pull(session, query) == ts.Rows(["minute", "url", "hits"], [(MINUTE, "/a", 3)])
    other.drop("rpm")
    assert pull(session, query) is None
    other.close()

"""Review of the SQL work of session 20: pull queries answered from a table's copy (the fast path,
``table_store.fast_pull``, and the general one, ``table_store.pull``) must answer what Spark answers for the same
statement, or leave it to Spark. Each test states the behaviour and fails (xfail strict) until the code does it. No
Spark, no broker: the copy is a SQLite file of the test's own."""

import datetime

import pytest

from freshet.sql import parser as p
from freshet.sql.session import SqlSession
from freshet.sql.table_store import fast_pull, pull, store_for

ROW_T = (datetime.datetime(2026, 1, 1, 0, 1), "/page/1", 5)


@pytest.fixture
def session(tmp_path):
    s = SqlSession("127.0.0.1:9", data_dir=str(tmp_path))  # a pull query never reaches the broker
    store = store_for(s)
    store.define("by_minute", [("minute", "timestamp"), ("url", "string"), ("requests", "bigint")], ["minute", "url"])
    store.upsert("by_minute", [ROW_T])
    store.define("by_id", [("id", "bigint"), ("name", "string")], ["id"])
    store.upsert("by_id", [(1, "one")])
    store.define("by_code", [("code", "string"), ("name", "string")], ["code"])
    store.upsert("by_code", [("1", "one")])
    yield s
    store.close()


def _answers(session, text: str) -> list:
    """The fast path's and the general path's answers (None: left to Spark)."""
    (stmt,) = p.parse(text)
    fast, general = fast_pull(session, text), pull(session, stmt.text)
    return [None if a is None else a.rows for a in (fast, general)]


@pytest.mark.parametrize("text, row", [
    # Spark casts the string to the key column's type: every spelling of the instant finds the row
    ("SELECT * FROM by_minute WHERE minute = '2026-01-01T00:01:00' AND url = '/page/1'", ROW_T),
    ("SELECT * FROM by_minute WHERE minute = '2026-01-01 00:01' AND url = '/page/1'", ROW_T),
    ("SELECT * FROM by_minute WHERE minute = '2026-01-01 00:01:00.000' AND url = '/page/1'", ROW_T),
    ("SELECT * FROM by_id WHERE id = '1'", (1, "one")),  # bigint = '1': the string cast to bigint
    ("SELECT * FROM by_code WHERE code = 1", ("1", "one")),  # string = 1: the string cast to a number
])
def test_a_key_literal_of_another_type_is_compared_as_spark_compares_it(session, text, row):
    """A pull query's key literal written in another type than its column (a timestamp in ISO 8601 with a T, a
    number quoted) is cast by Spark and finds the row; the copy compared its JSON text and answered no row. Either
    path must answer the row, or leave the statement to Spark (None), never an empty answer Spark would not give."""
    for answer in _answers(session, text):
        assert answer is None or answer == [row], text


def test_the_copy_still_answers_keys_written_in_their_columns_type(session):
    assert _answers(session, "SELECT * FROM by_minute WHERE minute = '2026-01-01 00:01:00' AND url = '/page/1'") \
        == [[ROW_T], [ROW_T]]
    assert _answers(session, "SELECT name FROM by_id WHERE id = 1") == [[("one",)], [("one",)]]
    assert _answers(session, "SELECT name FROM by_id WHERE id = 2") == [[], []]
    assert _answers(session, "SELECT name FROM by_code WHERE code = '1'") == [[("one",)], [("one",)]]


@pytest.mark.parametrize("text", ["SELECT * FROM by_id WHERE id = 1.00000000000000000001",
                                  "SELECT * FROM by_id WHERE id = 0.99999999999999999999"])
def test_a_decimal_literal_is_compared_exactly_with_a_whole_key(session, text):
    """Spark compares a bigint key with a decimal literal exactly (both cast to a decimal): 1.00000000000000000001
    is not 1. The copy read the literal as a float (1.0) and answered the row of 1."""
    for answer in _answers(session, text):
        assert answer is None or answer == [], text


def test_a_pull_query_over_http_does_not_hold_the_event_loop_while_the_copy_is_read(tmp_path, monkeypatch):
    """POST /sql answers a pull query of the common shape from the table's copy (SqlEndpoint.answer_now). The copy
    is SQLite, or PostgreSQL over a network (FRESHET_SQL_PG_DSN): its read must not run on the dashboard's event
    loop, which serves every other request (and streams every push query) meanwhile. Here the copy's read waits
    until the loop has run something else: on the loop itself it never sees that (its wait ends unmet)."""
    import asyncio
    import threading
    from types import SimpleNamespace

    import httpx

    from freshet.dashboard.app import create_app
    from freshet.dashboard.collector import Collector
    from freshet.sql.http import SqlEndpoint
    from freshet.sql.table_store import TableStore

    store = store_for(SimpleNamespace(data_dir=str(tmp_path)))
    store.define("by_id", [("id", "bigint"), ("name", "string")], ["id"])
    store.upsert("by_id", [(1, "one")])
    entered, loop_ran, seen = threading.Event(), threading.Event(), []
    lookup = TableStore.lookup

    def slow_lookup(self, name, given):  # a copy across a network: the loop should go on meanwhile
        entered.set()
        seen.append(loop_ran.wait(5))
        return lookup(self, name, given)

    monkeypatch.setattr(TableStore, "lookup", slow_lookup)
    app = create_app(Collector("127.0.0.1:9"), sql_endpoint=SqlEndpoint("127.0.0.1:9", data_dir=str(tmp_path)))

    async def scenario():
        async def other_work():  # what another request would do on the loop while the copy is read
            while not entered.is_set():
                await asyncio.sleep(0.01)
            loop_ran.set()

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dashboard") as client:
            answer, _ = await asyncio.gather(client.post("/sql", json={"sql": "SELECT name FROM by_id WHERE id = 1"}),
                                             other_work())
        return answer

    answer = asyncio.run(scenario())
    assert (answer.status_code, answer.text.splitlines()[1:]) == (200, ['["one"]'])
    assert seen and all(seen), "the copy was read on the event loop"
    store.close()

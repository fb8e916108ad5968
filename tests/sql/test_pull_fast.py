"""The pull queries' fast path (``table_store.fast_pull``: the common shape read without sqlglot) against the
general one (the statement parsed by freshet's parser, then ``table_store.pull`` with sqlglot), over thousands of
statements, good and bad: whenever the fast path answers, the general path answers the same (columns, values and
their types); where it does not, the general path runs as before, with its answers and errors. No Spark, no
broker: the copy is a SQLite file of the test's own."""

import datetime
import itertools
import random

import pytest

from freshet.sql import parser as p
from freshet.sql.session import SqlSession
from freshet.sql.table_store import fast_pull, pull, store_for

SELECTS = ["*", "k", "K", "`k`", "k, name", "name AS who", "name who", "n AS `x`", "k AS from", "k AS `from`", "nope",
           "`date`", "date", "next", "count(*)", "k + 1", "*, k", "", "DISTINCT k", "name,k", "name , n AS m", "k AS"]
TABLES = ["t1", "T1", "`t1`", "t2", "t3", "missing", "t1 x", "t1 AS x", "`t 1`", "from"]
WHERES = ["k = 1", "k = 01", "K = 1", "`k` = 1", "k=1", "k = '1'", "k = -1", "k = - 1", "k = 1.0", "k = 1.5",
          "1 = k", "k = 1 AND k = 2", "k = 2 AND k = 1", "k = 1 AND name = 'a'", "k = 1 OR k = 2", "(k = 1)",
          "k = 99999999999999999999", "k = 100000000000000000000", "k = 1e3", "k > 1", "k = NULL", "k IS NULL",
          "k = 'it''s'", "k = 'a\\'b'", 'k = "1"', "k = true", "", "k = 1 and", "t1.k = 1", "k = 1L", "k = +1",
          "minute = '2026-01-01 00:01:00' AND url = '/page/1'", "url = '/page/1' AND minute = '2026-01-01 00:01:00'",
          "minute = TIMESTAMP '2026-01-01 00:01:00' AND url = '/page/1'", "minute = '2026-01-01 00:01:00'",
          "minute = '2026-01-01T00:01:00' AND url = '/page/1'", "`date` = 'd1'", "date = 'd1'", "`date` = 'd2'",
          "next = 1", "`next` = 1", "url = '/page/1' AND minute = '2026-01-01 00:02:00'"]
TAILS = ["", ";", " ; ", " LIMIT 1", " LIMIT 0", " -- c", " EMIT CHANGES", ";;", " ORDER BY k", "\n", " GROUP BY k"]
HEADS = ["SELECT ", "select ", "  SELECT\n", "SELEC ", "Select\t"]
COMMON = ["SELECT * FROM t1 WHERE k = 1", "SELECT name, n FROM t1 WHERE k = 2;",
          "SELECT * FROM t2 WHERE minute = '2026-01-01 00:01:00' AND url = '/page/1'",
          "select requests from T2 where url = '/page/9' and minute = '2026-01-01 00:01:00'",
          "SELECT * FROM t1 WHERE k = 7", "SELECT `next` FROM t3 WHERE `date` = 'd1'"]


def statements(rng: random.Random):
    yield from COMMON
    for head, select, table, where, tail in itertools.product(["SELECT "], SELECTS, TABLES[:5], WHERES[:12], [""]):
        yield f"{head}{select} FROM {table} WHERE {where}{tail}"
    for _ in range(4000):
        text = (f"{rng.choice(HEADS)}{rng.choice(SELECTS)} FROM {rng.choice(TABLES)} WHERE {rng.choice(WHERES)}"
                f"{rng.choice(TAILS)}")
        if rng.random() < 0.3:  # a character lost or doubled: mostly statements nothing can read
            at = rng.randrange(len(text))
            text = text[:at] + (text[at] * 2 if rng.random() < 0.5 else "") + text[at + 1:]
        yield text


@pytest.fixture
def session(tmp_path):
    s = SqlSession("127.0.0.1:9", data_dir=str(tmp_path))  # a pull query never reaches the broker
    store = store_for(s)
    store.define("t1", [("k", "bigint"), ("name", "string"), ("n", "bigint")], ["k"])
    store.upsert("t1", [(1, "a", 10), (2, "b", 20), (-1, "minus", 30), (10**20, "big", 40), (1000, "thousand", 50)])
    store.define("t2", [("minute", "timestamp"), ("url", "string"), ("requests", "bigint"), ("avg", "double")],
                 ["minute", "url"])
    store.upsert("t2", [(datetime.datetime(2026, 1, 1, 0, 1), "/page/1", 5, 1.5),
                        (datetime.datetime(2026, 1, 1, 0, 1), "/page/9", 6, 2.0)])
    store.define("t3", [("date", "string"), ("next", "bigint")], ["date"])
    store.upsert("t3", [("d1", 1)])
    yield s
    store.close()


def typed(rows) -> list:
    return [tuple((type(v).__name__, v) for v in row) for row in rows.rows]


def test_the_fast_path_answers_as_the_general_path_or_leaves_it_the_statement(session):
    answered = compared = 0
    for text in statements(random.Random(48)):
        fast = fast_pull(session, text)
        if fast is None:
            continue  # the general path runs it, as before
        answered += 1
        (stmt,) = p.parse(text)  # one statement, left to Spark by freshet's parser
        assert type(stmt) is p.SparkSql, text
        general = pull(session, stmt.text)
        assert general is not None, text
        assert (fast.columns, typed(fast)) == (general.columns, typed(general)), text
        compared += bool(general.rows)
    assert all(fast_pull(session, text) is not None for text in COMMON)
    assert answered > 200 and compared > 100, (answered, compared)  # not a vacuous comparison


def test_a_fast_answer_is_the_copy_as_it_is_now(session):
    store = store_for(session)
    assert session.execute_one("SELECT n FROM t1 WHERE k = 1").rows == [(10,)]
    store.upsert("t1", [(1, "a", 11)])
    assert session.execute_one("SELECT n FROM t1 WHERE k = 1").rows == [(11,)]
    # the table declared again (by another process, say) with another key: read as it is now, not as cached
    store.define("t1", [("name", "string"), ("k", "bigint"), ("n", "bigint")], ["name"])
    store.upsert("t1", [("a", 1, 12)])
    assert fast_pull(session, "SELECT n FROM t1 WHERE k = 1") is None  # k is no longer the key: Spark's to answer
    assert list(session.execute("SELECT * FROM t1 WHERE name = 'a'"))[0].rows == [("a", 1, 12)]
    store.drop("t1")
    assert fast_pull(session, "SELECT * FROM t1 WHERE name = 'a'") is None

"""An update-mode push query prints a row only when it changed (ksqlDB's EMIT CHANGES): Spark's update mode writes
every key a microbatch touched, so a global count came again from the no-data batch after its first, and a max
that a new row did not move came again too."""

import json

import pytest
from confluent_kafka import Producer

from freshet.testing.polling import wait_for

from .helpers import produce

T0 = 1_767_225_600_000


def _send(bootstrap: str, topic: str, values: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, json.dumps(value).encode())
    assert producer.flush(30) == 0


def _read(spark, push, records: int) -> None:
    """Wait until the push query has read ``records`` input records and finished the batches that read them."""
    query = next(q for q in spark.streams.active if q.name == push.query_id)
    wait_for(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= records, 300,
             f"the push query to read {records} records")


@pytest.mark.parametrize("select, first, unchanged, changed, then", [
    # a global count: the no-data batch after the first (the watermark moved) and a batch whose rows the WHERE
    # drops both leave it at 100
    ("SELECT count(*) AS n FROM {s} WHERE user_id <> 'other'",
     [(100,)], [{"user_id": "other", "n": 1, "ts": T0}], [{"user_id": "u0", "n": 1, "ts": T0}], (101,)),
    # a max per key: a row below u0's max leaves u0's row as it was
    ("SELECT user_id, max(n) AS top FROM {s} GROUP BY user_id",
     [("u0", 98), ("u1", 99)], [{"user_id": "u0", "n": 1, "ts": T0}], [{"user_id": "u1", "n": 500, "ts": T0}],
     ("u1", 500)),
], ids=["global-count", "max-per-key"])
def test_an_unchanged_row_is_not_printed_again(sql, broker, topic_name, spark, select, first, unchanged, changed,
                                               then):
    values = [{"user_id": f"u{i % 2}", "n": i, "ts": T0 + i * 1000} for i in range(100)]
    produce(broker.bootstrap, topic_name, values, partitions=1)
    name = f"changes_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(f"CREATE STREAM {name} (user_id STRING, n INT, ts BIGINT) WITH (topic='{topic_name}', "
                     "format='json', timestamp='ts')"))
    push = sql.execute_one(select.format(s=name) + " EMIT CHANGES")
    rows = iter(push.rows)
    try:
        assert sorted(next(rows) for _ in first) == first
        _send(broker.bootstrap, topic_name, unchanged)
        _read(spark, push, 100 + len(unchanged))
        _send(broker.bootstrap, topic_name, changed)
        assert next(rows) == then  # not the unchanged row again
    finally:
        push.stop()


@pytest.mark.parametrize("select, key", [
    ("SELECT count(*) AS n FROM {s}", []),
    ("SELECT window.start AS minute, count(*) FROM {s} GROUP BY window(ts, '1 minute')", [0]),
    ("SELECT count(*), user_id FROM {s} GROUP BY user_id", [1]),
    ("SELECT upper(user_id) AS u, count(*) FROM {s} GROUP BY upper(user_id)", [0]),
    ("SELECT user_id, window.start, count(*) FROM {s} GROUP BY user_id, window(ts, '1 minute')", [0, 1]),
    ("SELECT * FROM (SELECT user_id, count(*) AS n FROM {s} GROUP BY user_id) x", [0]),
    # a key not selected: rows of different keys look alike, each is printed
    ("SELECT count(*) FROM {s} GROUP BY user_id", None),
    ("SELECT user_id, count(*) FROM {s} GROUP BY user_id, window(ts, '1 minute')", None),
    # a filter above the aggregation may hide a row and let it through again unchanged: printed again then
    ("SELECT user_id, count(*) FROM {s} GROUP BY user_id HAVING count(*) > 1", None),
    ("SELECT user_id, n FROM (SELECT user_id, count(*) AS n FROM {s} GROUP BY user_id) x WHERE n > 1", None),
    ("SELECT user_id, n FROM {s}", None),  # no aggregation: every row is a row of its own
], ids=["global", "window", "key-last", "key-expression", "key-and-window", "subquery", "key-not-selected",
        "window-not-selected", "having", "where-above", "no-aggregation"])
def test_the_key_of_a_result_row_is_read_from_the_plan(sql, broker, topic_name, select, key):
    from freshet.sql.plans import key_columns

    produce(broker.bootstrap, topic_name, [{"user_id": "u0", "n": 1, "ts": T0}], partitions=1)
    name = f"keys_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(f"CREATE STREAM {name} (user_id STRING, n INT, ts BIGINT) WITH (topic='{topic_name}', "
                     "format='json', timestamp='ts')"))
    assert key_columns(sql.dataframe(select.format(s=name))) == key


def test_rows_are_given_when_they_change_and_the_oldest_keys_are_forgotten_first():
    from freshet.sql.changes import Changes

    every = Changes(None)
    assert every([("a", 1), ("a", 1)]) == [("a", 1), ("a", 1)]  # no key: every row (a stream's rows)
    one = Changes([])
    assert one([(100,)]) == [(100,)] and one([(100,)]) == [] and one([(101,)]) == [(101,)]
    keyed = Changes([0], kept=2)
    assert keyed([("a", 1), ("b", 1)]) == [("a", 1), ("b", 1)]
    assert keyed([("a", 1), ("b", 2)]) == [("b", 2)]
    assert keyed([("a", 2), ("c", 1)]) == [("a", 2), ("c", 1)]  # c in: b, the least recently changed, out
    assert keyed([("c", 1), ("a", 2)]) == []  # remembered
    assert keyed([("b", 2)]) == [("b", 2)]  # forgotten: given again
    assert keyed([("a", 3), ("a", 3)]) == [("a", 3)]

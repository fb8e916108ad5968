"""SqlSession over a broker and the shared SparkSession: streams and tables declared over topics, push queries
with their stop conditions, the seed's examples as SQL against the Python pipelines on the same data, and bad
input refused in one line with nothing started."""

import datetime
import json

import pytest

from freshet.pipelines import access_logs as al
from freshet.sql.errors import SqlError
from freshet.sql.results import Message, Push, Rows
from freshet.sql.session import SqlSession
from freshet.testing.polling import wait_for

from .helpers import access_lines, access_stream, latest, produce

T0 = 1_767_225_600_000


def run(sql: SqlSession, script: str) -> list:
    """Every statement's result; a push query's rows read to its end."""
    out = []
    for result in sql.execute(script):
        out.append(list(result.rows) if isinstance(result, Push) else result)
    return out


def clicks(bootstrap: str, topic: str, n: int = 30) -> int:
    values = [{"user_id": f"u{i % 3}", "url": f"/p{i % 4}", "ts": T0 + i * 10_000} for i in range(n)]
    return produce(bootstrap, topic, values, [v["user_id"] for v in values])


def test_a_push_query_prints_changes_until_its_limit(sql, broker, topic_name, spark):
    clicks(broker.bootstrap, topic_name)
    created, streams, described, counts = run(sql, f"""
        CREATE STREAM clicks_{id(sql)} (user_id STRING, url STRING, ts BIGINT, page AS upper(url))
            WITH (topic='{topic_name}', format='json', timestamp='ts', watermark='30 seconds');
        SHOW STREAMS;
        DESCRIBE clicks_{id(sql)};
        SELECT user_id, count(*) AS n, max(page) AS last_page FROM clicks_{id(sql)} GROUP BY user_id
            EMIT CHANGES LIMIT 3;""")
    assert isinstance(created, Message) and topic_name in created.text
    assert (f"clicks_{id(sql)}", topic_name, "json", "", "ts") in streams.rows
    types = {row[0]: row[1] for row in described.rows}
    assert types["ts"] == "timestamp" and types["page"] == "string" and types["ROWTIME"] == "timestamp"
    assert ("watermark", "30 seconds", "") in described.rows
    assert sorted(counts) == [("u0", 10, "/P3"), ("u1", 10, "/P3"), ("u2", 10, "/P3")]
    assert not spark.streams.active  # LIMIT reached: the query is stopped


def test_until_rows_stops_once_that_many_input_rows_are_read(sql, broker, topic_name, spark):
    n = clicks(broker.bootstrap, topic_name, 40)
    name = f"c_{id(sql)}"
    _, windows = run(sql, f"""
        CREATE STREAM {name} (user_id STRING, url STRING, ts BIGINT) WITH (topic='{topic_name}', format='json',
            timestamp='ts');
        SELECT window(ts, '1 minute').start AS minute, count(*) AS n FROM {name} GROUP BY 1
            EMIT CHANGES UNTIL {n} ROWS""")
    per_minute = latest(windows)
    assert sum(v[0] for v in per_minute.values()) == n
    assert set(v[0] for v in per_minute.values()) <= {6, 4}  # 6 clicks a minute; the last minute has 4
    assert not spark.streams.active


def test_until_a_duration_stops_the_query_by_itself(sql, broker, topic_name, spark):
    clicks(broker.bootstrap, topic_name, 3)
    name = f"d_{id(sql)}"
    _, push = list(sql.execute(f"""
        CREATE STREAM {name} (user_id STRING, url STRING, ts BIGINT) WITH (topic='{topic_name}', format='json');
        SELECT user_id, url FROM {name} EMIT CHANGES UNTIL '3 seconds'"""))
    assert push.info["until_seconds"] == 3 and push.info["limit"] is None
    rows = list(push.rows)  # ends by itself, with no LIMIT and no rows counted: its time is up
    assert set(rows) <= {("u0", "/p0"), ("u1", "/p1"), ("u2", "/p2")}
    assert not spark.streams.active


@pytest.mark.parametrize("pipeline, select, key_width", [
    (al.requests_per_minute,
     "SELECT window.start AS window_start, window.end AS window_end, count(*) AS requests, sum(size) AS bytes, "
     "sum(CASE WHEN status >= 500 THEN 1 ELSE 0 END) AS server_errors FROM {s} "
     "WHERE client_ip <> '' AND event_time IS NOT NULL GROUP BY window(event_time, '1 minute')", 2),
    (al.hopping_average,
     "SELECT window.start AS window_start, window.end AS window_end, count(*) / 5D AS avg_requests_per_minute, "
     "avg(size) AS avg_size FROM {s} WHERE client_ip <> '' AND event_time IS NOT NULL "
     "GROUP BY window(event_time, '5 minutes', '1 minute')", 2),
    (al.unique_users_per_hour,
     "SELECT window.start AS window_start, window.end AS window_end, size(collect_set(client_ip)) AS unique_exact, "
     "approx_count_distinct(client_ip, 0.05) AS unique_approx FROM {s} "
     "WHERE client_ip <> '' AND event_time IS NOT NULL GROUP BY window(event_time, '1 hour')", 2),
], ids=["requests-per-minute", "hopping-average", "unique-users"])
def test_the_seed_examples_in_sql_match_the_python_pipelines(sql, broker, topic_name, spark, pipeline, select,
                                                            key_width):
    lines = access_lines(1500)
    n = produce(broker.bootstrap, topic_name, lines)
    name = f"access_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(access_stream(name, topic_name)))
    (rows,) = run(sql, select.format(s=name) + f" EMIT CHANGES UNTIL {n} ROWS")
    static = spark.createDataFrame([(line.encode(),) for line in lines], "value binary")
    expected = pipeline(al.parse(static)).collect()
    want = {tuple(r[:key_width]): tuple(r[key_width:key_width + len(rows[0]) - key_width]) for r in expected}
    assert latest(rows, key_width) == want


def test_a_table_is_the_latest_row_per_key_and_deletes_leave_it(sql, broker, topic_name):
    def change(op, before, after):
        return {"before": before, "after": after, "op": op, "ts_ms": T0, "source": {"table": "users"}}

    events = [change("c", None, {"id": 1, "name": "ada", "age": 36}),
              change("c", None, {"id": 2, "name": "bob", "age": 20}),
              change("u", {"id": 1, "name": "ada", "age": 36}, {"id": 1, "name": "ada", "age": 37}),
              change("c", None, {"id": 3, "name": "cy", "age": 50}),
              change("d", {"id": 2, "name": "bob", "age": 20}, None)]
    keys = [json.dumps({"id": (e["after"] or e["before"])["id"]}) for e in events]
    n = produce(broker.bootstrap, topic_name, events + [None], keys + [json.dumps({"id": 2})], partitions=1)
    name = f"users_{id(sql)}"
    _, tables, rows = run(sql, f"""
        CREATE TABLE {name} (id INT PRIMARY KEY, name STRING, age INT) WITH (topic='{topic_name}', format='debezium');
        SHOW TABLES;
        SELECT id, name, age FROM {name} EMIT CHANGES UNTIL {n} ROWS""")
    assert (name, topic_name, "debezium", "id", "") in tables.rows
    assert latest(rows) == {(1,): ("ada", 37), (3,): ("cy", 50)}


def test_plain_spark_sql_runs_as_it_is(sql):
    (two,) = run(sql, "SELECT 1 + 1 AS two")
    assert two == Rows(["two"], [(2,)])


def test_explain_shows_the_plan_spark_will_run(sql, broker, topic_name):
    clicks(broker.bootstrap, topic_name, 3)
    name = f"e_{id(sql)}"
    _, plan = run(sql, f"""CREATE STREAM {name} (user_id STRING, ts BIGINT) WITH (topic='{topic_name}',
        format='json', timestamp='ts'); EXPLAIN SELECT user_id, count(*) FROM {name} GROUP BY user_id EMIT CHANGES""")
    text = plan.rows[0][0]
    assert "Aggregate" in text and "EventTimeWatermark" in text and topic_name in text


@pytest.mark.parametrize("statement, line, column, says", [
    ("SELECT nope FROM {s} EMIT CHANGES", 3, 8, "`nope` cannot be resolved"),
    ("SELECT user_id\n  FORM {s} EMIT CHANGES", 4, 8, "Syntax error"),
    ("SELECT user_id FROM {s}", 3, 1, "add EMIT CHANGES"),
    ("SELECT user_id FROM {s} ORDER BY user_id EMIT CHANGES", None, None, "Sorting is not supported"),
    ("CREATE STREAM other (a INT) WITH (topic='no-such-topic', format='json')", 3, 1, "does not exist"),
    ("CREATE STREAM other (a INT, b VARCHA) WITH (topic='{t}', format='json')", 3, 29, "unknown type"),
    ("CREATE STREAM other (a INT, b AS c + 1) WITH (topic='{t}', format='json')", 3, 1, "`c` cannot be resolved"),
    ("CREATE STREAM {s} (a INT) WITH (topic='{t}', format='json')", 3, 1, "already exists"),
    ("DROP TABLE {s}", 3, 1, "no table named"),
], ids=["unknown-column", "syntax", "no-emit", "sort-on-stream", "unknown-topic", "unknown-type",
        "computed-column", "exists", "drop-wrong-kind"])
def test_bad_input_is_one_line_with_line_and_column_and_starts_nothing(sql, broker, topic_name, spark, statement,
                                                                       line, column, says):
    clicks(broker.bootstrap, topic_name, 3)
    name = f"bad_{abs(hash(topic_name)) % 10**8}"
    script = (f"CREATE STREAM {name} (user_id STRING, ts BIGINT)\n  WITH (topic='{topic_name}', format='json');\n"
              + statement.format(s=name, t=topic_name))
    results = sql.execute(script)
    next(results)
    before = sql.catalog.definitions()
    with pytest.raises(SqlError) as caught:
        next(results)
    error = caught.value
    assert says in error.message and "\n" not in str(error), str(error)
    if line is not None:
        assert (error.line, error.column) == (line, column), str(error)
    assert not spark.streams.active
    assert sql.catalog.definitions() == before


def test_definitions_survive_a_restart_and_drop_removes_them(own_broker, spark, topic_name):
    clicks(own_broker.bootstrap, topic_name, 3)
    first = SqlSession(own_broker.bootstrap, spark)
    run(first, f"CREATE STREAM kept (user_id STRING, ts BIGINT) WITH (topic='{topic_name}', format='json');"
               f"CREATE TABLE kept_users (id INT, name STRING) WITH (topic='{topic_name}', format='json', key='id')")
    first.close()
    own_broker.restart()
    second = SqlSession(own_broker.bootstrap, spark)
    try:
        streams, tables = run(second, "SHOW STREAMS; SHOW TABLES")
        assert [r[0] for r in streams.rows] == ["kept"] and [r[0] for r in tables.rows] == ["kept_users"]
        (rows,) = run(second, "SELECT user_id FROM kept EMIT CHANGES LIMIT 3")
        assert sorted(rows) == [("u0",), ("u1",), ("u2",)]
        dropped, streams = run(second, "DROP STREAM kept DELETE TOPIC; SHOW STREAMS")
        assert "dropped" in dropped.text and streams.rows == []
        from freshet.client.admin import TopicAdmin

        assert topic_name not in TopicAdmin(own_broker.bootstrap).list_topics()
    finally:
        second.close()


def test_csv_and_avro_streams(sql, broker, topic_name, tmp_path):
    import io

    import fastavro

    produce(broker.bootstrap, topic_name, [f"u{i};{i * 1.5};{T0 + i}" for i in range(4)])
    schema = {"type": "record", "name": "Click", "fields": [
        {"name": "user_id", "type": "string"}, {"name": "n", "type": ["null", "long"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}

    def avro(record: dict, confluent: bool) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
        return (b"\x00\x00\x00\x00\x07" if confluent else b"") + out.getvalue()

    avro_topic = topic_name + "-avro"
    produce(broker.bootstrap, avro_topic, [avro({"user_id": f"a{i}", "n": i if i % 2 else None, "ts": T0 + i},
                                               confluent=False) for i in range(4)])
    framed_topic = topic_name + "-framed"
    produce(broker.bootstrap, framed_topic, [avro({"user_id": "f", "n": 7, "ts": T0}, confluent=True)])
    (tmp_path / "click.avsc").write_text(json.dumps(schema))
    suffix = abs(hash(topic_name)) % 10**8
    _, _, _, described, csv_rows, avro_rows, framed_rows = run(sql, f"""
        CREATE STREAM csv_{suffix} (user_id STRING, amount DOUBLE, ts BIGINT)
            WITH (topic='{topic_name}', format='csv', delimiter=';', timestamp='ts');
        CREATE STREAM avro_{suffix} WITH (topic='{avro_topic}', format='avro', schema_file='{tmp_path / "click.avsc"}');
        CREATE STREAM framed_{suffix} WITH (topic='{framed_topic}', format='avro', framing='confluent',
            schema='{json.dumps(schema)}');
        DESCRIBE avro_{suffix};
        SELECT user_id, amount FROM csv_{suffix} EMIT CHANGES LIMIT 4;
        SELECT user_id, n, ts FROM avro_{suffix} EMIT CHANGES LIMIT 4;
        SELECT user_id, n FROM framed_{suffix} EMIT CHANGES LIMIT 1""")
    assert [r[:2] for r in described.rows[:3]] == [("user_id", "string"), ("n", "bigint"), ("ts", "timestamp")]
    assert sorted(csv_rows) == [("u0", 0.0), ("u1", 1.5), ("u2", 3.0), ("u3", 4.5)]
    assert sorted((u, n) for u, n, _ in avro_rows) == [("a0", None), ("a1", 1), ("a2", None), ("a3", 3)]
    assert framed_rows == [("f", 7)]


def test_rows_behind_the_watermark_are_dropped_and_counted(sql, broker, topic_name, spark):
    minute = 60_000
    on_time = [{"user_id": "u", "ts": T0 + i * minute} for i in range(10)]
    produce(broker.bootstrap, topic_name, on_time, partitions=1)
    name = f"late_{abs(hash(topic_name)) % 10**8}"
    _, push = list(sql.execute(f"""
        CREATE STREAM {name} (user_id STRING, ts BIGINT) WITH (topic='{topic_name}', format='json', timestamp='ts',
            watermark='30 seconds');
        SELECT window.start AS minute, count(*) AS n FROM {name} GROUP BY window(ts, '1 minute')
            EMIT CHANGES UNTIL 13 ROWS"""))
    rows = []
    for row in push.rows:
        if not rows:
            # the first batch is in and the watermark 30 s behind minute 9; Spark judges lateness by the watermark
            # of the batch before, so the late rows go in after the batch that follows (a batch without data)
            from confluent_kafka import Producer

            query = spark.streams.active[0]
            wait_for(lambda: len(query.recentProgress) >= 2, 120, "the batch after the first")
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for ts in (T0 + minute, T0 + 2 * minute, T0 + 20 * minute):
                producer.produce(topic_name, json.dumps({"user_id": "u", "ts": ts}).encode())
            assert producer.flush(30) == 0
        rows.append(row)
    counts = latest(rows)
    assert counts[(datetime.datetime(2026, 1, 1, 0, 1),)] == (1,)  # the late row did not count
    assert counts[(datetime.datetime(2026, 1, 1, 0, 20),)] == (1,)
    assert push.info["late_rows"] == 2


def test_sessions_in_sql_match_the_pipeline_once_the_watermark_closes_them(sql, broker, topic_name, spark):
    lines = access_lines(1000, rate_per_s=0.02)  # one request every 50 s: a client comes back every half hour or so
    produce(broker.bootstrap, topic_name, lines)
    static = spark.createDataFrame([(line.encode(),) for line in lines], "value binary")
    events = al.parse(static)
    watermark = events.agg({"event_time": "max"}).collect()[0][0] - datetime.timedelta(minutes=2)
    expected = {(r.client_ip, r.session_start): (r.session_end, r.requests, r.distinct_paths)
                for r in al.sessions(events).collect() if r.session_end < watermark}
    assert len(expected) > 50
    name = f"sessions_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(access_stream(name, topic_name)))
    (rows,) = run(sql, f"""SELECT client_ip, session_window.start AS session_start, session_window.end AS session_end,
        count(*) AS requests, size(collect_set(path)) AS distinct_paths FROM {name}
        WHERE client_ip <> '' AND event_time IS NOT NULL
        GROUP BY session_window(event_time, '30 minutes'), client_ip EMIT FINAL LIMIT {len(expected)}""")
    assert latest(rows, 2) == expected


def test_a_join_of_two_streams_within_an_hour_matches_the_clicks_to_their_searches(sql, broker, topic_name):
    from freshet.gen.search_clicks import ClickEvent, search_clicks

    events = list(search_clicks(400, seed=5))
    searches = [e for e in events if not isinstance(e, ClickEvent)]
    clicks_ = [e for e in events if isinstance(e, ClickEvent)]
    produce(broker.bootstrap, topic_name + "-s", [e.value() for e in searches])
    produce(broker.bootstrap, topic_name + "-c", [e.value() for e in clicks_])
    by_id = {s.search_id: s for s in searches}
    expected = sorted((c.search_id, by_id[c.search_id].query, c.url) for c in clicks_
                      if by_id[c.search_id].ts_ms <= c.ts_ms <= by_id[c.search_id].ts_ms + 3_600_000)
    assert 50 < len(expected) < len(clicks_)  # some clicks come more than an hour later: no match
    n = abs(hash(topic_name)) % 10**8
    *_, rows = run(sql, f"""
        CREATE STREAM searches_{n} (search_id STRING, user STRING, query STRING, ts BIGINT)
            WITH (topic='{topic_name}-s', format='json', timestamp='ts', watermark='10 minutes');
        CREATE STREAM clicks_{n} (search_id STRING, user STRING, url STRING, ts BIGINT)
            WITH (topic='{topic_name}-c', format='json', timestamp='ts', watermark='10 minutes');
        SELECT s.search_id, s.query, c.url FROM searches_{n} s JOIN clicks_{n} c
            ON s.search_id = c.search_id AND c.ts BETWEEN s.ts AND s.ts + INTERVAL 1 HOUR
        EMIT CHANGES UNTIL {len(events)} ROWS""")
    assert sorted(rows) == expected


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_a_stream_joined_to_a_table_meets_each_key_as_it_is_when_the_row_is_processed(sql, broker, topic_name, fmt):
    from confluent_kafka import Producer

    def user(row: dict, before: dict | None = None) -> dict:
        if fmt == "json":
            return row
        return {"before": before, "after": row, "op": "u" if before else "c", "source": {"table": "users"}}

    users, visits = topic_name + "-users", topic_name + "-visits"
    produce(broker.bootstrap, users, [user({"id": 1, "name": "ada"}), user({"id": 2, "name": "bob"})],
            ['{"id": 1}', '{"id": 2}'], partitions=1)
    produce(broker.bootstrap, visits, [{"user_id": 1, "url": "/a", "ts": T0}, {"user_id": 2, "url": "/b", "ts": T0},
                                       {"user_id": 3, "url": "/c", "ts": T0}], partitions=1)
    n = abs(hash(topic_name)) % 10**8
    *_, push = list(sql.execute(f"""
        CREATE TABLE users_{n} (id INT PRIMARY KEY, name STRING) WITH (topic='{users}', format='{fmt}');
        CREATE STREAM visits_{n} (user_id INT, url STRING, ts BIGINT) WITH (topic='{visits}', format='json',
            timestamp='ts');
        SELECT v.url, u.name FROM visits_{n} v LEFT JOIN users_{n} u ON v.user_id = u.id EMIT CHANGES LIMIT 5"""))
    rows = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for row in push.rows:
        rows.append(row)
        if len(rows) == 3:  # the first visits are joined: ada is renamed, then she visits again
            renamed = user({"id": 1, "name": "ada lovelace"}, before={"id": 1, "name": "ada"})
            producer.produce(users, json.dumps(renamed).encode(), b'{"id": 1}')
            assert producer.flush(30) == 0
            producer.produce(visits, json.dumps({"user_id": 1, "url": "/d", "ts": T0 + 1}).encode())
            producer.produce(visits, json.dumps({"user_id": 2, "url": "/e", "ts": T0 + 2}).encode())
            assert producer.flush(30) == 0
    assert sorted(rows[:3]) == [("/a", "ada"), ("/b", "bob"), ("/c", None)]
    assert sorted(rows[3:]) == [("/d", "ada lovelace"), ("/e", "bob")]


def test_every_word_spark_starts_a_statement_with_is_one_the_parser_lets_through(spark):
    """The parser refuses a statement whose first word starts none of Spark's (before Spark starts): checked here
    against the first tokens Spark's own grammar (its ANTLR parser's ATN) allows a statement, so no statement Spark
    would parse is refused; and the words refused are refused by Spark's parser too."""
    from py4j.java_gateway import get_field

    from freshet.sql import parser as p
    from freshet.sql.session import quiet_query_context_logs

    quiet_query_context_logs()
    jvm = spark._jvm
    grammar = jvm.org.apache.spark.sql.catalyst.parser.SqlBaseParser
    antlr = grammar(jvm.org.antlr.v4.runtime.CommonTokenStream(
        jvm.org.apache.spark.sql.catalyst.parser.SqlBaseLexer(jvm.org.antlr.v4.runtime.CharStreams.fromString(""))))
    atn = antlr.getATN()
    first = atn.nextTokens(get_field(atn, "ruleToStartState")[grammar.RULE_singleStatement])
    vocabulary = antlr.getVocabulary()
    starts = {vocabulary.getSymbolicName(t) for t in first.toList()}
    assert {"SELECT", "WITH", "CREATE", "MSCK", "LEFT_PAREN"} <= starts
    assert starts - {"LEFT_PAREN"} <= p.SPARK_STARTS, sorted(starts - p.SPARK_STARTS)
    parse_plan = spark._jsparkSession.sessionState().sqlParser().parsePlan
    for typo in ("SELEC 1", "CRATE VIEW v AS SELECT 1", "`SELECT` 1", "'x' 1"):
        with pytest.raises(Exception, match=r"(?s)PARSE_SYNTAX_ERROR.*pos 0\)"):
            parse_plan(typo)
        with pytest.raises(SqlError, match=r"line 1, column 1: syntax error at or near"):
            p.parse(typo)


def test_a_table_over_the_cdc_connectors_topic_answers_pull_queries_as_postgresql_changes(sql, broker, postgres, db):
    """CREATE TABLE ... WITH (format='debezium', key='id') over the topic freshet's PostgreSQL connector writes:
    a pull query (no EMIT) reads the table as it is now; an insert, an update and a delete (its tombstone: the row
    gone) in PostgreSQL are seen in it."""
    from freshet.cdc.postgres import CdcConfig, drop_replication_slot
    from freshet.testing.cdc import run_connector, unique
    from freshet.testing.polling import wait_for

    cur, schema = db[0].cursor(), db[1]
    cur.execute(f"CREATE TABLE {schema}.users (id int PRIMARY KEY, name text, age int); INSERT INTO {schema}.users "
                "VALUES (1, 'ada', 36), (2, 'bob', 20), (3, 'cy', 50)")
    config = CdcConfig(postgres.dsn, [f"{schema}.users"], unique("pg"), broker.bootstrap, slot=unique("slot"),
                       publication=unique("pub"))
    name = f"users_{schema}"

    def pulled(where: str = "") -> list:
        (rows,) = run(sql, f"SELECT id, name, age FROM {name} {where}")
        return sorted(rows.rows)

    def changes():  # the connector streams: its snapshot in the table, then PostgreSQL changes
        run(sql, f"CREATE TABLE {name} (id INT, name STRING, age INT) WITH (topic='{config.topic_prefix}.{schema}"
                 f".users', format='debezium', key='id')")
        wait_for(lambda: pulled() == [(1, "ada", 36), (2, "bob", 20), (3, "cy", 50)], timeout=90,
                 what="the snapshot's rows")
        cur.execute(f"INSERT INTO {schema}.users VALUES (4, 'dee', 28)")
        cur.execute(f"UPDATE {schema}.users SET age = 21 WHERE id = 2")
        cur.execute(f"DELETE FROM {schema}.users WHERE id = 3")

    try:
        assert run_connector(config, changes, changes=3).stats.acknowledged_changes >= 3
    finally:
        drop_replication_slot(postgres.dsn, config.slot)
    assert pulled("WHERE id = 3") == []  # the delete's tombstone: the row gone
    assert pulled() == [(1, "ada", 36), (2, "bob", 21), (4, "dee", 28)]
    assert pulled("WHERE id = 2") == [(2, "bob", 21)]

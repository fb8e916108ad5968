"""Persistent queries: CREATE TABLE ... AS SELECT writes a compacted topic keyed by the group key and keeps a copy
that pull queries read; SHOW QUERIES and TERMINATE; bad input starts nothing; a persistent query killed -9 and
restarted from its stored definition writes each window once."""

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta

import pytest
from confluent_kafka import Producer

from freshet.client.admin import TopicAdmin
from freshet.client.pipeline_registry import read_pipelines
from freshet.pipelines import access_logs as al
from freshet.sql.errors import SqlError
from freshet.sql.queries import group_keys
from freshet.testing.crash import read_everything
from freshet.testing.polling import wait_for

from .helpers import COMBINED, access_lines, access_stream, produce, sql_in_a_pty

RPM = ("SELECT window.start AS minute, count(*) AS requests FROM {s} WHERE client_ip <> '' AND event_time IS NOT "
       "NULL GROUP BY window(event_time, '1 minute')")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FRESHET_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def expected_per_minute(spark, lines) -> dict:
    static = spark.createDataFrame([(line.encode(),) for line in lines], "value binary")
    return {r.window_start: r.requests for r in al.requests_per_minute(al.parse(static)).collect()}


def one(sql, statement):
    (result,) = sql.execute(statement)
    return result


def test_group_keys_are_the_selected_group_expressions():
    assert group_keys(RPM.format(s="s"), ["minute", "requests"]) == ["minute"]
    assert group_keys("SELECT upper(url) AS u, status, count(*) FROM s GROUP BY 2, upper(url)",
                      ["u", "status", "count(1)"]) == ["status", "u"]
    with pytest.raises(SqlError, match="GROUP BY u is not selected"):
        group_keys("SELECT count(*) FROM s GROUP BY u", ["count(1)"])


def test_a_table_as_select_keeps_a_compacted_topic_and_answers_pull_queries(sql, broker, topic_name, spark,
                                                                           data_dir, postgres, db, monkeypatch):
    """The table's queryable copy in PostgreSQL (FRESHET_SQL_PG_DSN), pull queries answered from it; TERMINATE of an
    unknown id changes nothing, TERMINATE ALL stops every query (here two), a DROP takes the copy's rows."""
    conn, schema = db
    monkeypatch.setenv("FRESHET_SQL_PG_DSN", f"{postgres.dsn} options=-csearch_path={schema}")
    lines = access_lines(600)
    produce(broker.bootstrap, topic_name, lines)
    expected = expected_per_minute(spark, lines)
    suffix = abs(hash(topic_name)) % 10**8
    stream, table = f"access_{suffix}", f"rpm_{suffix}"
    one(sql, access_stream(stream, topic_name))
    admin = TopicAdmin(broker.bootstrap)

    # bad input: one line, nothing started, stored or created
    for bad, says in ((f"CREATE TABLE {table} AS SELECT client_ip FROM {stream}", "needs a GROUP BY"),
                      (f"CREATE TABLE {table} AS SELECT count(*) AS n FROM {stream} GROUP BY client_ip",
                       "GROUP BY client_ip is not selected"),
                      (f"CREATE TABLE {table} WITH (colour='red') AS SELECT 1", "unknown option 'colour'"),
                      (f"CREATE TABLE {table} AS SELECT nope, count(*) FROM {stream} GROUP BY nope", "nope"),
                      # a stream writes each row once: an aggregation without a window, Spark refuses at start
                      (f"CREATE STREAM {table} AS SELECT client_ip, count(*) AS n FROM {stream} GROUP BY client_ip",
                       "output mode: append.*or CREATE TABLE")):
        with pytest.raises(SqlError, match=says) as caught:
            one(sql, bad)
        assert "\n" not in str(caught.value)
    assert table not in admin.list_topics() and sql.catalog.get(table) is None
    assert not [q for q in sql.catalog.queries().values() if q["sink"] == table]
    assert not spark.streams.active

    created = one(sql, f"CREATE TABLE {table} AS {RPM.format(s=stream)}")
    query_id = re.search(r"ID (\S+):", created.text).group(1)
    assert query_id == f"CTAS_{table.upper()}_1"
    errors = re.search(r"ID (\S+):", one(sql, f"CREATE STREAM errors_{suffix} AS SELECT client_ip, path FROM {stream} "
                                              "WHERE status >= 500").text).group(1)
    try:
        shown = one(sql, "SHOW QUERIES")
        assert (query_id, "RUNNING", table) in [tuple(r[:3]) for r in shown.rows]
        # the runner's registry has it, as it has `freshet run`'s pipelines: the dashboard lists it
        wait_for(lambda: read_pipelines(broker.bootstrap).get(query_id, {}).get("status") == "running",
                 timeout=120, what="the query in the pipeline registry")

        def pulled(minute):
            rows = one(sql, f"SELECT * FROM {table} WHERE minute = '{minute.isoformat(sep=' ')}'").rows
            return rows[0][1] if rows else None

        wait_for(lambda: all(pulled(m) == n for m, n in expected.items()), timeout=300,
                 what="every minute's final count in the table's copy")
        assert one(sql, f"SELECT requests FROM {table} WHERE minute = '1999-01-01 00:00:00'").rows == []
        cur = conn.cursor()  # the copy is PostgreSQL's (in the DSN's schema), no SQLite file
        cur.execute(f"SELECT count(*) FROM {schema}.freshet_sql_rows WHERE name = %s", (table.lower(),))
        assert cur.fetchone() == (len(expected),)
        assert not (data_dir / "sql" / "tables.sqlite").exists()

        assert admin.describe_topic(table).configs["cleanup.policy"][0] == "compact"
        latest = {}
        for key, value in ((json.loads(r["key"]), json.loads(r["value"])) for r in _keyed(broker, table)):
            latest[key["minute"]] = value["requests"]
        assert sorted(latest.values()) == sorted(expected.values())
        before = sql.catalog.queries()
        with pytest.raises(SqlError, match="no query NOPE_1; SHOW QUERIES lists them"):
            one(sql, "TERMINATE NOPE_1")
        assert sql.catalog.queries() == before
        assert {query_id, errors} <= {q.name for q in spark.streams.active if q.isActive}
    finally:
        terminated = one(sql, "TERMINATE ALL")
    assert re.fullmatch(r"\d+ queries terminated\.", terminated.text), terminated.text
    assert not {query_id, errors} & {q.name for q in spark.streams.active}
    statuses = {r[0]: r[1] for r in one(sql, "SHOW QUERIES").rows}
    assert "RUNNING" not in statuses.values() and statuses[query_id] == statuses[errors] == "TERMINATED"
    assert one(sql, "TERMINATE ALL").text == "No query is running: nothing terminated."
    # dropped, the table's copy goes with it: a pull query no longer answers from it
    some_minute = min(expected).isoformat(sep=" ")
    assert one(sql, f"SELECT requests FROM {table} WHERE minute = '{some_minute}'").rows
    one(sql, f"DROP TABLE {table}")
    cur.execute(f"SELECT count(*) FROM {schema}.freshet_sql_rows WHERE name = %s", (table.lower(),))
    assert cur.fetchone() == (0,)
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_NOT_FOUND"):
        one(sql, f"SELECT requests FROM {table} WHERE minute = '{some_minute}'")


def _keyed(broker, topic) -> list[dict]:
    """Every committed record of partition 0: key and value."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    wait_for(lambda: out.extend({"key": m.key(), "value": m.value()} for m in consumer.consume(1000, 0.5)
                                if m.error() is None) or consumer.position([TopicPartition(topic, 0)])[0].offset >= end,
             timeout=60, what=f"{topic} read to its end")
    consumer.close()
    return out


def _driver(bootstrap, env, log, script):
    args = [sys.executable, os.path.join(os.path.dirname(__file__), "persistent_driver.py"), bootstrap, script]
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


def _later(line: str, hours: int) -> str:
    """The access-log line with its time ``hours`` on."""
    stamp = re.search(r"\[([^\]]+)\]", line).group(1)
    moved = datetime.strptime(stamp, "%d/%b/%Y:%H:%M:%S %z") + timedelta(hours=hours)
    return line.replace(stamp, moved.strftime("%d/%b/%Y:%H:%M:%S %z"))


def per_minute_in_python(first: list[str], rest: list[str], late: timedelta) -> Counter:
    """RPM's counts computed without Spark, for a query that reads ``first`` in one microbatch and ``rest`` after
    it: the lines the stream's pattern parses, by the minute of their time; a line of ``rest`` whose window ended
    by the watermark ``first`` left (its latest time less ``late``) is dropped, as Spark drops late rows."""
    def times(lines):
        for line in lines:
            match = re.match(COMBINED, line)
            if match and match.group(1):
                yield datetime.strptime(match.group(2), "%d/%b/%Y:%H:%M:%S %z")

    watermark = max(times(first)) - late
    counts = Counter(t.replace(second=0) for t in times(first))
    counts.update(minute for minute in (t.replace(second=0) for t in times(rest))
                  if minute + timedelta(minutes=1) > watermark)
    return counts


@pytest.mark.timeout(600)  # two Spark drivers start one after the other
def test_a_persistent_query_killed_and_restarted_writes_each_window_once(broker, topic_name, data_dir, tmp_path):
    """Each closed window written once, with the count of a run without the kill (late lines after the restart
    dropped by the watermark the checkpoint keeps). No shared SparkSession, so the test runs beside the Spark
    tests: the first driver declares the stream, the expected counts are computed in Python. The restart is
    `freshet sql --serve`'s (its restore, its message, Ctrl-C)."""
    lines = access_lines(480, rate_per_s=0.5)  # 16 minutes: windows close (2 minutes late) in each half
    half = len(lines) // 2
    produce(broker.bootstrap, topic_name, lines[:half])
    expected = per_minute_in_python(lines[:half], lines[half:], late=timedelta(minutes=2))
    # the data has late lines after the restart: the watermark comes back from the checkpoint and drops them
    assert sum(expected.values()) < sum(per_minute_in_python(lines, [], late=timedelta(minutes=2)).values())
    suffix = abs(hash(topic_name)) % 10**8
    stream, out = f"access_{suffix}", f"per_minute_{suffix}"
    env = dict(os.environ, FRESHET_DATA_DIR=str(data_dir))
    log = open(tmp_path / "driver.log", "ab")

    admin = TopicAdmin(broker.bootstrap)

    def windows():
        if out not in admin.list_topics():
            return []
        return [json.loads(v)["minute"] for v in read_everything(broker.bootstrap, out, 1, timeout_s=30)[0]]

    first = _driver(broker.bootstrap, env, log,
                    f"{access_stream(stream, topic_name)};\nCREATE STREAM {out} AS {RPM.format(s=stream)}")
    try:
        # each look starts a consumer: once a second (a microbatch's trigger) is often enough
        wait_for(lambda: len(windows()) >= 2 or first.poll() is not None, timeout=400, what="the first windows",
                 interval=1.0)
        assert first.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the rest, and a line an hour on: the watermark closes every window of the data
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for line in lines[half:] + [_later(lines[-1], 1)]:
        producer.produce(topic_name, line.encode())
    assert producer.flush(30) == 0
    log.close()
    # restarted as a user restarts it: `freshet sql --serve` restores the stored query, says so and serves it until
    # Ctrl-C, which stops it and exits 0
    with sql_in_a_pty(broker, tmp_path, "--serve", "--data-dir", str(data_dir)) as second:
        second.expect(r"1 persistent query running: (CSAS_\S+)\r?\n")
        restored = second.match.group(1)
        second.expect_exact("serving persistent queries; Ctrl-C stops them")
        wait_for(lambda: len(set(windows())) >= len(expected) or not second.isalive(), timeout=400,
                 what="every window written", interval=1.0)
        assert second.isalive(), (tmp_path / "spark.log").read_text()[-3000:]
        second.sendintr()
    written = Counter(windows())
    assert all(n == 1 for n in written.values()), [w for w, n in written.items() if n > 1]
    counts = {json.loads(v)["minute"]: json.loads(v)["requests"]
              for v in read_everything(broker.bootstrap, out, 1)[0]}
    assert sorted(counts.values()) == sorted(expected.values())
    assert f"Created query with ID {restored}:" in (tmp_path / "driver.log").read_text()


"""Sinks (topic, PostgreSQL upsert) and late events dropped-and-counted."""

import re
from datetime import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from freshet.client import consumer_config
from freshet.client.produce import produce_records
from freshet.testing.postgres import rows as pg_rows
from freshet.gen.access_logs import format_line
from freshet.pipelines import access_logs as al
from freshet.spark.postgres import PostgresUpsertSink
from freshet.spark.progress import LateRowsCounter
from freshet.testing.topics import create_topic


def create(bootstrap, *names, partitions=1):
    for name in names:
        create_topic(bootstrap, name, partitions)


def test_topic_sink_writes_key_value_and_headers(spark, broker, topic_name, tmp_path):
    out_topic = topic_name + "-out"
    create(broker.bootstrap, topic_name, out_topic)
    produce_records(broker.bootstrap, topic_name, ((b"k%d" % i, b"v%d" % i, None) for i in range(50)))
    src = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", topic_name).option("startingOffsets", "earliest").load())
    query = (src.selectExpr("key", "upper(cast(value as string)) as value",
                            "array(named_struct('key', 'origin', 'value', cast('spark' as binary))) as headers")
             .writeStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", out_topic).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    consumer = Consumer(consumer_config(broker.bootstrap))
    consumer.assign([TopicPartition(out_topic, 0, 0)])
    got = []
    while len(got) < 50:
        got += [m for m in consumer.consume(100, 1) if m.error() is None]
    consumer.close()
    assert sorted((m.key(), m.value()) for m in got) == sorted((b"k%d" % i, b"V%d" % i) for i in range(50))
    assert got[0].headers() == [("origin", b"spark")]


def test_topic_sink_takes_spark_kafka_column_types_and_the_topic_option_wins(spark, broker, topic_name):
    chosen, other = topic_name + "-chosen", topic_name + "-other"
    create(broker.bootstrap, chosen, other)

    def write(df, **options):
        writer = df.write.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap).mode("append")
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save()

    refused = {
        "the value column must be string or binary, not int": ("1 as value", {"topic": chosen}),
        "the key column must be string or binary, not double": ("cast(1.5 as double) as key", "'v' as value", {"topic": chosen}),
        "the partition column must be int, not bigint": ("'v' as value", "cast(0 as bigint) as partition",
                                                         {"topic": chosen}),
        "the headers column must be array<struct<key: string, value: binary>>, not array<string>":
            ("'v' as value", "array('h') as headers", {"topic": chosen}),
        "give a topic option or a topic column": ("'v' as value", {}),
    }
    for message, (*columns, options) in refused.items():
        with pytest.raises(Exception, match=re.escape(message)):
            write(spark.range(3).selectExpr(*columns), **options)
    with pytest.raises(Exception, match="a row's topic is null"):
        write(spark.range(3).selectExpr("'v' as value", "cast(null as string) as topic"))

    # the topic option overrides a topic column, as in Spark's Kafka sink
    write(spark.range(5).selectExpr("cast(id as string) as value", f"'{other}' as topic"), topic=chosen)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    ends = {t: admin.list_offsets({TopicPartition(t, 0): OffsetSpec.latest()})[TopicPartition(t, 0)].result(10).offset
            for t in (chosen, other)}
    assert ends == {chosen: 5, other: 0}


def test_postgres_upsert_sink_writes_nested_columns_as_jsonb_and_timestamps_as_instants(spark, postgres,
                                                                                       monkeypatch):
    import time

    sink = PostgresUpsertSink(postgres.dsn, "nested_test", ["id"], "nested-test")
    df = spark.sql("SELECT 1 AS id, named_struct('url', '/a', 'hits', 3) AS top, map('x', 1) AS counts, "
                   "array(named_struct('k', 'a')) AS pairs, array(1, 2) AS ns, "
                   "timestamp'2026-11-22 12:00:00' AS at")  # the session's time zone is UTC
    # PySpark collects timestamps as naive datetimes in the driver's local zone: write them from a
    # driver that is not on UTC
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        sink(df, 0)
    finally:
        monkeypatch.undo()
        time.tzset()
    row = pg_rows(postgres.dsn, "SELECT top, counts, pairs, ns, at AT TIME ZONE 'UTC' FROM nested_test",
                  session=("SET TIME ZONE 'Asia/Tokyo'",))[0]
    types = dict(pg_rows(postgres.dsn, "SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_name = 'nested_test'"))
    assert row == ({"url": "/a", "hits": 3}, {"x": 1}, [{"k": "a"}], [1, 2], datetime(2026, 11, 22, 12, 0))
    assert types["top"] == types["counts"] == types["pairs"] == "jsonb" and types["ns"] == "ARRAY"


def test_postgres_upsert_sink_is_idempotent_per_batch(spark, postgres):
    sink = PostgresUpsertSink(postgres.dsn, "upsert_test", ["window_start"], "upsert-test")
    schema = "window_start timestamp, requests long"
    first = spark.createDataFrame([(datetime(2026, 1, 1, 0, 0), 5), (datetime(2026, 1, 1, 0, 1), 7)], schema)
    second = spark.createDataFrame([(datetime(2026, 1, 1, 0, 1), 9)], schema)  # a corrected window
    sink(first, 0)
    sink(second, 1)
    sink(first, 0)  # Spark replays batch 0 after a crash: must change nothing
    sink(second, 1)
    rows = pg_rows(postgres.dsn, "SELECT extract(minute from window_start)::int, requests FROM upsert_test ORDER BY 1")
    progress = pg_rows(postgres.dsn, "SELECT batch_id FROM freshet_sink_progress WHERE sink_id = 'upsert-test'")[0]
    assert rows == [(0, 5), (1, 9)]
    assert progress == (1,)


def log_record(ip, minute, second, size=100):
    ts = int(datetime(2026, 11, 22, 12, minute, second).timestamp() * 1000)
    line = format_line(ip, ts, "GET", "/", 200, size, "-", "curl/8.4.0")
    return ip.encode(), line.encode(), ts


def test_late_events_beyond_the_watermark_are_dropped_and_counted(spark, broker, topic_name, tmp_path):
    create(broker.bootstrap, topic_name)
    counter = LateRowsCounter.install(spark)
    results = {}

    def collect(df, batch_id):
        for r in df.collect():
            results[r.window_start] = r.requests

    def run():
        raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
               .option("subscribe", topic_name).option("startingOffsets", "earliest").load())
        query = (al.requests_per_minute(al.parse(raw), lateness="2 minutes").writeStream.outputMode("update")
                 .foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return query

    # minute 0 and minute 10: the watermark moves to 12:08
    produce_records(broker.bootstrap, topic_name, [log_record("1.1.1.1", 0, 5), log_record("1.1.1.1", 10, 0)])
    first = run()
    # within the lateness (12:09 >= 12:08): counted, window 12:09 appears; beyond it (12:01): dropped
    produce_records(broker.bootstrap, topic_name, [log_record("2.2.2.2", 9, 0), log_record("3.3.3.3", 1, 0),
                                                   log_record("4.4.4.4", 10, 30)])
    second = run()
    t = lambda m: datetime(2026, 11, 22, 12, m)  # noqa: E731
    assert results == {t(0): 1, t(10): 2, t(9): 1}
    assert counter.settle(first) and counter.settle(second)
    assert counter.dropped(second.id) + counter.dropped(first.id) >= 1
    assert sum(op["numRowsDroppedByWatermark"] for p in second.recentProgress for op in p["stateOperators"]) == 1


def test_sessions_are_written_once_the_watermark_closes_them(spark, broker, postgres, topic_name, tmp_path):
    """`freshet run sessions --to postgres:T` (Spark has no update mode for session windows: it failed
    with STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION); a session is written once, when closed."""
    from freshet.pipelines.runner import PipelineSpec, start

    create(broker.bootstrap, topic_name)
    produce_records(broker.bootstrap, topic_name, [
        log_record("1.1.1.1", 0, 0), log_record("1.1.1.1", 10, 0), log_record("2.2.2.2", 5, 0),
        log_record("1.1.1.1", 45, 0),  # 35 minutes after 12:10: a new session; the watermark moves to 12:43
    ])
    table = "sessions_" + topic_name.rsplit("-", 1)[-1]
    query = start(spark, PipelineSpec("sessions", topic_name, f"postgres:{table}", broker.bootstrap,
                                      str(tmp_path / "ck"), available_now=True, pg_dsn=postgres.dsn))
    query.awaitTermination(300)
    assert query.exception() is None
    rows = pg_rows(postgres.dsn, f"SELECT client_ip, to_char(session_start AT TIME ZONE 'UTC', 'HH24:MI'), "
                                 f"to_char(session_end AT TIME ZONE 'UTC', 'HH24:MI'), requests FROM {table} "
                                 "ORDER BY 1, 2")
    # closed: ended before the watermark (12:43); 1.1.1.1's 12:45 session is still open
    assert rows == [("1.1.1.1", "12:00", "12:40", 2), ("2.2.2.2", "12:05", "12:35", 1)]

"""Stateful event windows on a stream: state carries across microbatches and query restarts."""

from datetime import UTC, datetime

import numpy as np
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.produce import produce_records
from freshet.gen.access_logs import format_line
from freshet.pipelines import access_logs as al
from freshet.pipelines.event_windows import count_windows
from freshet.testing.postgres import rows as pg_rows
from freshet.pipelines.runner import PipelineSpec, start


def record(ip, minute, size):
    ts = int(datetime(2026, 11, 22, 12, minute, tzinfo=UTC).timestamp() * 1000)
    return ip.encode(), format_line(ip, ts, "GET", "/", 200, size, "-", "curl").encode(), ts


def run_to_postgres(spark, broker, postgres, topic, tmp_path, pipeline, per_microbatch, columns, order):
    """`freshet run PIPELINE --to postgres:T --available-now`, then T's rows: (query, rows)."""
    table = pipeline.replace("-", "_") + "_" + topic.rsplit("-", 1)[-1]
    query = start(spark, PipelineSpec(pipeline, topic, f"postgres:{table}", broker.bootstrap, str(tmp_path / "ck"),
                                      available_now=True, max_offsets_per_trigger=per_microbatch, pg_dsn=postgres.dsn))
    query.awaitTermination(300)
    assert query.exception() is None
    return query, pg_rows(postgres.dsn, f"SELECT {columns} FROM {table} ORDER BY {order}")


def test_count_windows_carry_state_across_restarts(spark, broker, topic_name, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result(10)
    out = []

    def collect(df, batch_id):
        out.extend((r.client_ip, r.window_index, r.events, r.bytes) for r in df.collect())

    def run():
        raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
               .option("subscribe", topic_name).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", 2).load())
        query = (count_windows(al.parse(raw), n=3).writeStream.outputMode("append").foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None

    produce_records(broker.bootstrap, topic_name, [record("9.9.9.9", m, 1) for m in range(5)], partition=0)
    run()  # several microbatches of at most 2 events: a window spans batches
    assert out == [("9.9.9.9", 0, 3, 3)]
    produce_records(broker.bootstrap, topic_name, [record("9.9.9.9", m, 10) for m in range(5, 9)], partition=0)
    run()  # a new query on the same checkpoint: the two pending events are remembered
    assert out == [("9.9.9.9", 0, 3, 3), ("9.9.9.9", 1, 3, 1 + 1 + 10), ("9.9.9.9", 2, 3, 30)]


def test_sliding_windows_keep_every_event_and_drop_late_ones(spark, broker, postgres, topic_name, tmp_path):
    """`freshet run sliding-windows --to postgres:T`: a client's two requests in the same second are
    two rows (keyed by partition and offset; keyed by client and time, one overwrote the other), and
    an event later than the lateness is dropped and counted, not counted into a window."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(10)
    ip = "7.7.7.7"
    produce_records(broker.bootstrap, topic_name, [
        record(ip, 0, 1), record(ip, 0, 2),  # microbatch 1: the same second
        record(ip, 4, 4), record(ip, 20, 8),  # 2: the watermark becomes 12:18 (2 minutes of lateness) ...
        record(ip, 19, 16), record(ip, 21, 64),  # 3: ... and holds back late events from the next microbatch on
        record(ip, 5, 100), record(ip, 25, 32),  # 4: 12:05 is behind it: dropped
    ], partition=0)
    query, rows = run_to_postgres(spark, broker, postgres, topic_name, tmp_path, "sliding-windows", 2,
                                  "\"offset\", to_char(event_time AT TIME ZONE 'UTC', 'HH24:MI'), events_in_span, "
                                  "bytes_in_span", "\"offset\"")
    assert rows == [
        (0, "12:00", 1, 1), (1, "12:00", 2, 3), (2, "12:04", 3, 7), (3, "12:20", 1, 8),
        (4, "12:19", 1, 16),  # 12:20 came before it but is after it: not in its span
        (5, "12:21", 3, 8 + 16 + 64), (7, "12:25", 4, 8 + 16 + 64 + 32),
    ]
    assert sum(op["numRowsDroppedByWatermark"] for p in query.recentProgress for op in p["stateOperators"]) == 1
    # the key's state holds only what a later event can still reach (12:00 and 12:04 are gone: any
    # event still accepted is after the watermark, 12:19) and is removed when the watermark passes 12:35
    [state] = spark.read.format("statestore").load(str(tmp_path / "ck")).collect()
    held = [datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")
            for ms in np.frombuffer(state.value.groupState.times, "<i8")]
    assert (state.key.client_ip, held) == (ip, ["12:19", "12:20", "12:21", "12:25"])
    assert state.value.timeoutTimestamp == int(datetime(2026, 11, 22, 12, 35, tzinfo=UTC).timestamp() * 1000)


def test_trend_on_a_stream_compares_each_closed_minute_with_the_one_before(spark, broker, postgres, topic_name,
                                                                          tmp_path):
    """`freshet run trend`: requests per minute beside the previous window, flagged above 3x and below
    1/3, each written once its minute is closed; state carries across microbatches."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(10)
    ip = "8.8.8.8"
    # 3 events per microbatch: the fifth ends with 12:10, which moves the watermark to 12:08; late events
    # are held back from the microbatch after next (the seventh), where the last one, 12:01, is dropped
    minutes = [0] * 2 + [1] * 8 + [2] * 2 + [5] * 2 + [10] * 4 + [1]
    produce_records(broker.bootstrap, topic_name, [record(ip, m, 1) for m in minutes], partition=0)
    query, rows = run_to_postgres(spark, broker, postgres, topic_name, tmp_path, "trend", 3,
                                  "to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), requests, previous, ratio, flag",
                                  "window_start")
    assert rows == [("12:00", 2, None, None, None), ("12:01", 8, 2, 4.0, "spike"), ("12:02", 2, 8, 0.25, "drop"),
                    ("12:05", 2, 2, 1.0, None)]  # 12:10 is still open
    assert sum(op["numRowsDroppedByWatermark"] for p in query.recentProgress for op in p["stateOperators"]) == 1

"""Stateful event windows on a stream: state carries across microbatches and query restarts."""

from datetime import datetime

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.produce import produce_records
from freshet.gen.access_logs import format_line
from freshet.pipelines import access_logs as al
from freshet.pipelines.event_windows import count_windows


def record(ip, minute, size):
    ts = int(datetime(2026, 11, 22, 12, minute).timestamp() * 1000)
    return ip.encode(), format_line(ip, ts, "GET", "/", 200, size, "-", "curl").encode(), ts


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

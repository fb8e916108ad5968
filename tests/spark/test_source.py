"""The freshet source against a real broker: streaming, resume, admission control, data loss, batch reads.
The tests that read records run with both readers (``reader``: the columnar one and librdkafka)."""

import json

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from freshet.client.produce import produce_records
from freshet.testing.topics import create_topic


def numbered(start, stop, partitions):
    return ((b"k%d" % (i % 7), b"%d" % i, None) for i in range(start, stop))


READERS = pytest.mark.parametrize("reader", ["columnar", "librdkafka"])


def stream(spark, broker, topic, **options):
    reader = spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, path, checkpoint):
    query = (df.select("partition", "offset", "value").writeStream.format("parquet").option("path", path)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


@READERS
def test_stream_resumes_from_checkpoint_with_no_duplicates(spark, broker, reader, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    for p in range(3):
        produce_records(broker.bootstrap, topic_name, numbered(p * 1000, p * 1000 + 1000, 3), partition=p)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest", maxOffsetsPerTrigger=700)
    first = run_available_now(df, out, ck)
    assert len([p for p in first.recentProgress if p["numInputRows"]]) >= 4  # admission control split the work
    assert all(p["numInputRows"] <= 700 + 3 for p in first.recentProgress)
    produce_records(broker.bootstrap, topic_name, numbered(3000, 3600, 3))
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest", maxOffsetsPerTrigger=700), out, ck)
    rows = spark.read.parquet(out).collect()
    assert len(rows) == 3600
    assert len({(r.partition, r.offset) for r in rows}) == 3600  # every record once
    assert sorted(int(r.value) for r in rows) == list(range(3600))
    last = json.loads(first.lastProgress["sources"][0]["endOffset"]) if isinstance(
        first.lastProgress["sources"][0]["endOffset"], str) else first.lastProgress["sources"][0]["endOffset"]
    assert last == {topic_name: {"0": 1000, "1": 1000, "2": 1000}}


@READERS
def test_new_partitions_are_picked_up(spark, broker, reader, topic_name, tmp_path):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    produce_records(broker.bootstrap, topic_name, numbered(0, 10, 1))
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest"), out, ck)
    admin.create_partitions([NewPartitions(topic_name, 2)])[topic_name].result(10)
    produce_records(broker.bootstrap, topic_name, numbered(10, 15, 1), partition=1)
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest"), out, ck)
    rows = spark.read.parquet(out).collect()
    assert sorted((r.partition, int(r.value)) for r in rows) == [(0, i) for i in range(10)] + [(1, i) for i in
                                                                                               range(10, 15)]


@READERS
def test_fail_on_data_loss(spark, broker, reader, topic_name, tmp_path):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    produce_records(broker.bootstrap, topic_name, numbered(0, 100, 1))
    tp = TopicPartition(topic_name, 0, 50)
    admin.delete_records([tp])[tp].result(10)
    start = json.dumps({topic_name: {"0": 0}})
    query = (stream(spark, broker, topic_name, reader=reader, startingOffsets=start).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "ck1")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        query.awaitTermination(300)
    assert "were deleted" in str(err.value) and "failOnDataLoss" in str(err.value)
    out = str(tmp_path / "out")
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets=start, failOnDataLoss="false"), out,
                      str(tmp_path / "ck2"))
    assert sorted(int(r.value) for r in spark.read.parquet(out).collect()) == list(range(50, 100))


@READERS
def test_a_recreated_topic_fails_the_query_or_goes_on_per_fail_on_data_loss(spark, broker, reader, topic_name, tmp_path):
    """The topic is deleted and created again under the query: its offsets start over below where the
    checkpoint stands. Spark's Kafka source fails (failOnDataLoss) or goes on from the new end."""
    import time

    admin = create_topic(broker.bootstrap, topic_name, 1)
    produce_records(broker.bootstrap, topic_name, numbered(0, 10, 1))
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest"), out, ck)
    admin.delete_topics([topic_name])[topic_name].result(10)
    deadline = time.monotonic() + 30
    while True:  # the name is free once the deletion has gone through
        try:
            admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(10)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    produce_records(broker.bootstrap, topic_name, numbered(100, 103, 1))
    query = (stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest").select("partition", "offset", "value")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        query.awaitTermination(300)
    assert f"{topic_name}-0 now ends at offset 3, below offset 10" in str(err.value)
    assert "failOnDataLoss=false" in str(err.value)
    # failOnDataLoss=false: the records between (0..2) are skipped, as Spark's Kafka source does, and
    # the query goes on from offset 3
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest", failOnDataLoss="false"), out, ck)
    produce_records(broker.bootstrap, topic_name, numbered(103, 105, 1))
    run_available_now(stream(spark, broker, topic_name, reader=reader, startingOffsets="earliest", failOnDataLoss="false"), out, ck)
    assert sorted(int(r.value) for r in spark.read.parquet(out).collect()) == [*range(10), 103, 104]


@READERS
def test_batch_read_with_offset_range_and_headers(spark, broker, reader, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic_name, b"v%d" % i, b"k%d" % i, partition=i % 2, headers=[("source", b"test")])
    producer.flush(10)
    df = (spark.read.format("freshet").option("reader", reader).option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic_name).option("includeHeaders", "true")
          .option("startingOffsets", json.dumps({topic_name: {"0": 2, "1": -2}}))
          .option("endingOffsets", json.dumps({topic_name: {"0": 5, "1": -1}})).load())
    rows = df.collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 2), (0, 3), (0, 4)] + [(1, i) for i in range(10)]
    assert all(r.headers == [("source", b"test")] or [tuple(h) for h in r.headers] == [("source", b"test")]
               for r in rows)
    assert {r.topic for r in rows} == {topic_name} and {r.timestampType for r in rows} == {0}
    assert df.schema.fieldNames() == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                                      "headers"]


def test_bad_options_are_clear(spark, broker):
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap).load().collect()
    with pytest.raises(Exception, match="do not exist"):
        (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", "no-such-topic").load().collect())
    with pytest.raises(Exception, match="maxPartitions must be a whole number"):
        (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", "x").option("maxPartitions", "-1").load().collect())
    with pytest.raises(Exception, match="minRecordsPerPartition must be a whole number"):
        (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", "x").option("minRecordsPerPartition", "many").load().collect())
    with pytest.raises(Exception, match='Kafka client options: No such configuration property: "no.such.property"'):
        (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", "x").option("kafka.no.such.property", "1").load().collect())


def test_offset_options_follow_spark_kafka_rules_with_clear_errors(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 2)
    for p in range(2):
        produce_records(broker.bootstrap, topic_name, numbered(0, 5, 2), partition=p)

    def read(**options):
        reader = spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    batch_refusals = {
        "startingOffsets cannot be latest for batch queries": {"startingOffsets": "latest"},
        "endingOffsets cannot be earliest for batch queries": {"endingOffsets": "earliest"},
        f"startingOffsets for {topic_name}-1 cannot be -1 \\(latest\\)":
            {"startingOffsets": json.dumps({topic_name: {"0": 0, "1": -1}})},
        f"endingOffsets for {topic_name}-0 cannot be -2 \\(earliest\\)":
            {"endingOffsets": json.dumps({topic_name: {"0": -2}})},
        f"startingOffsets for {topic_name}-0 cannot be -7": {"startingOffsets": json.dumps({topic_name: {"0": -7}})},
        f"startingOffsets names other-0, {topic_name}-5, which this source does not read":
            {"startingOffsets": json.dumps({topic_name: {"5": 0}, "other": {"0": 0}})},
        f"startingOffsets 100 for {topic_name}-0 is after the end of the read":
            {"startingOffsets": json.dumps({topic_name: {"0": 100}})},
    }
    for message, options in batch_refusals.items():
        with pytest.raises(Exception, match=message):
            read(subscribe=topic_name, **options).collect()
    with pytest.raises(Exception, match=f"assign names partition\\(s\\) {topic_name}-7, nope-0, which do not exist"):
        read(assign=json.dumps({topic_name: [0, 7], "nope": [0]})).collect()
    assert read(assign=json.dumps({topic_name: [1]})).count() == 5

    for message, options in {"endingOffsets is for batch queries": {"endingOffsets": "latest"},
                             "maxOffsetsPerTrigger must be a positive whole number, got '0'":
                                 {"maxOffsetsPerTrigger": "0"},
                             "maxOffsetsPerTrigger must be a positive whole number, got '-5'":
                                 {"maxOffsetsPerTrigger": "-5"}}.items():
        with pytest.raises(Exception, match=message):
            (stream(spark, broker, topic_name, **options).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "ck")).start().awaitTermination(60))


@READERS
def test_batch_reads_with_nothing_to_read_are_empty(spark, broker, reader, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    reader = (spark.read.format("freshet").option("reader", reader).option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic_name))
    assert reader.load().count() == 0  # an empty topic
    for p in range(2):
        produce_records(broker.bootstrap, topic_name, numbered(0, 5, 2), partition=p)
    everything = json.dumps({topic_name: {"0": -1, "1": -1}})
    assert reader.option("endingOffsets", json.dumps({topic_name: {"0": 0, "1": 0}})).load().count() == 0
    assert reader.option("startingOffsets", json.dumps({topic_name: {"0": 5, "1": 5}})).option(
        "endingOffsets", everything).load().count() == 0  # a start at the end


@READERS
def test_one_task_reads_partitions_of_several_topics_at_once(spark, broker, reader, topic_name, tmp_path):
    """maxPartitions=1: every range of the microbatch in one task and one consumer, including a
    partition whose first records were deleted (skipped with failOnDataLoss=false)."""
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    admin = create_topic(broker.bootstrap, first, 3)
    create_topic(broker.bootstrap, second, 2)
    expected = set()
    for topic, partitions in ((first, 3), (second, 2)):
        for p in range(partitions):
            produce_records(broker.bootstrap, topic, numbered(0, 3000 + 500 * p, 1), partition=p)
            expected |= {(topic, p, i) for i in range(3000 + 500 * p)}
    tp = TopicPartition(first, 1, 1200)
    admin.delete_records([tp])[tp].result(10)
    expected -= {(first, 1, i) for i in range(1200)}
    start = json.dumps({first: {"0": 0, "1": 0, "2": 0}, second: {"0": 0, "1": 0}})
    df = (spark.readStream.format("freshet").option("reader", reader).option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribePattern", f"{topic_name}-.*").option("startingOffsets", start)
          .option("failOnDataLoss", "false").option("maxPartitions", 1).load())
    out = str(tmp_path / "out")
    query = (df.select("topic", "partition", "offset", "value").writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    rows = spark.read.parquet(out).collect()
    assert len(rows) == len(expected)
    assert {(r.topic, r.partition, r.offset) for r in rows} == expected
    assert all(int(r.value) == r.offset for r in rows)

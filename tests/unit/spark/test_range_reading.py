"""How one Spark task turns consume() results into Arrow columns: runs per topic-partition,
offsets with and without gaps, the range's end, end-of-partition markers and re-fetched records."""

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import KafkaError, Message  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from freshet.spark.source import RangeProgress, TopicPartitionRange, runs, source_schema  # noqa: E402

SCHEMA = to_arrow_schema(source_schema(), timezone="UTC")


def record(partition, offset, topic="t", ts=1_700_000_000_000):
    return Message(topic=topic, partition=partition, offset=offset, key=b"k%d" % offset, value=b"v%d" % offset,
                   timestamp=(1, ts + offset))


def eof(partition, offset, topic="t"):
    return Message(topic=topic, partition=partition, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


def progress(start, end, partition=0):
    return RangeProgress(TopicPartitionRange("t", partition, start, end, "b", False, True, {}), SCHEMA)


def test_a_consume_result_splits_into_runs_per_topic_partition():
    messages = [record(0, 1), record(0, 2), record(1, 7), record(0, 3)]
    assert [(k, [m.offset() for m in run]) for k, run in runs(messages, False)] == [(0, [1, 2]), (1, [7]), (0, [3])]
    messages = [record(0, 1, "a"), record(0, 2, "b")]
    assert [k for k, _ in runs(messages, True)] == [("a", 0), ("b", 0)]
    assert [k for k, _ in runs([record(2, 5), record(2, 6)], False)] == [2]


def test_columns_of_a_run_without_and_with_gaps():
    p = progress(10, 100)
    p.take([record(0, o) for o in range(10, 15)])
    p.take([record(0, o) for o in (20, 22, 23)])  # compacted away: 15..19, 21
    assert p.position == 24 and not p.done
    batch = p.columns.flush()
    assert batch.schema == SCHEMA
    assert batch.column("offset").to_pylist() == [10, 11, 12, 13, 14, 20, 22, 23]
    assert batch.column("value").to_pylist()[-1] == b"v23"
    assert batch.column("partition").to_pylist() == [0] * 8 and batch.column("topic").to_pylist() == ["t"] * 8
    assert batch.column("timestampType").to_pylist() == [0] * 8  # librdkafka's create time (1) is Kafka's 0
    assert [t.timestamp() * 1000 for t in batch.column("timestamp").to_pylist()][:1] == [1_700_000_000_010]
    assert p.columns.count == 0  # flushed


def test_the_range_end_refetched_records_and_end_of_partition():
    p = progress(0, 5)
    p.take([record(0, 0), record(0, 1), eof(0, 2)])
    assert p.position == 2 and p.columns.count == 2
    p.take([record(0, 1), record(0, 2), record(0, 3)])  # 1 again, after a re-assignment: taken once
    p.take([record(0, 4), record(0, 5), record(0, 6)])  # past the end: left alone
    assert p.done and p.columns.flush().column("offset").to_pylist() == [0, 1, 2, 3, 4]
    q = progress(0, 10)
    q.take([record(0, 0), eof(0, 12)])  # the partition ends past the range (records 1..9 compacted away)
    assert q.done and q.columns.count == 1


def test_records_deleted_before_they_were_read_are_reported():
    p = progress(0, 10)
    reset = Message(topic="t", partition=0, offset=3, error=KafkaError(KafkaError._AUTO_OFFSET_RESET))
    assert p.take([record(0, 0), reset]) is True and p.position == 1 and p.columns.count == 1


def test_other_errors_are_raised():
    p = progress(0, 10)
    with pytest.raises(RuntimeError, match="reading t-0"):
        p.take([Message(topic="t", partition=0, offset=0, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))])

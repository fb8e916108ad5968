"""readOnDriver=true: the freshet source reads each microbatch in the driver's Python process (PySpark's simple
stream reader) and Spark takes the records from its block manager; no Python task reads in the executors."""

import pytest

from freshet.client.produce import produce_records
from freshet.testing.topics import create_topic

from .test_source import numbered, run_available_now, stream


def test_a_stream_read_on_the_driver_takes_every_record_once_in_capped_batches_and_resumes(spark, broker, topic_name,
                                                                                           tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    for p in range(3):
        produce_records(broker.bootstrap, topic_name, numbered(p * 100, p * 100 + 100, 3), partition=p)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def driver_stream():
        return stream(spark, broker, topic_name, readOnDriver="true", startingOffsets="earliest",
                      maxOffsetsPerTrigger=120)

    first = run_available_now(driver_stream(), out, ck)
    batches = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sum(batches) == 300 and len(batches) >= 3 and max(batches) <= 120 + 3  # maxOffsetsPerTrigger holds
    produce_records(broker.bootstrap, topic_name, numbered(300, 360, 3))
    run_available_now(driver_stream(), out, ck)  # from the checkpoint: only the new records
    rows = spark.read.parquet(out).collect()
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 360
    assert sorted(int(r.value) for r in rows) == list(range(360))


def test_read_on_driver_takes_only_true_or_false(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 1)
    with pytest.raises(Exception, match="option readOnDriver takes true or false, got 'yes'"):
        (stream(spark, broker, topic_name, readOnDriver="yes").writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ck")).start().awaitTermination(60))


def test_the_driver_reader_reads_a_capped_batch_that_pyspark_can_copy_and_reads_a_batch_again(broker, topic_name):
    import copy

    from freshet.spark.source import FreshetDriverStreamReader, source_schema

    create_topic(broker.bootstrap, topic_name, 2)
    for p in range(2):
        produce_records(broker.bootstrap, topic_name, numbered(p * 50, p * 50 + 50, 2), partition=p)
    reader = FreshetDriverStreamReader({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic_name,
                                        "startingOffsets": "earliest", "maxOffsetsPerTrigger": "60"}, source_schema())
    start = reader.initialOffset()
    assert start == {topic_name: {"0": 0, "1": 0}}
    batches, end = reader.read(start)
    assert end == {topic_name: {"0": 30, "1": 30}}  # the cap, spread over what each partition has waiting
    again = copy.copy(batches)  # PySpark hands Spark a copy of the iterator it keeps for the batch
    values = sorted(int(v) for b in batches for v in b.column("value").to_pylist())
    assert values == list(range(30)) + list(range(50, 80))
    assert sorted(int(v) for b in again for v in b.column("value").to_pylist()) == values
    # a batch asked again after a restart (its records no longer held) is read anew, the same records
    replayed = reader.readBetweenOffsets(start, end)
    assert sorted(int(v) for b in replayed for v in b.column("value").to_pylist()) == values
    rest, last = reader.read(end)
    assert last == {topic_name: {"0": 50, "1": 50}}
    assert sum(b.num_rows for b in rest) == 40
    nothing, same = reader.read(last)
    assert same == last and list(nothing) == []

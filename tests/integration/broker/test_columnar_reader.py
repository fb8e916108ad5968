"""The Spark source's two readers against a real broker, record for record: the columnar reader
(Fetch requests, C decoder, freshet.client.columnar) and librdkafka (a confluent-kafka consumer), on
every codec a producer writes, headers and null keys, transactions committed and aborted under both
isolation levels, log-append time, records deleted before they are read, and ranges that start and end
inside batches. No Spark session: the source's read functions are called as an executor calls them."""

import pytest
from confluent_kafka import Producer, TopicPartition

pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema

from freshet.client.columnar import ColumnarUnavailable, RangeReader, ReadRange
from freshet.spark.source import (
    TopicPartitionRange,
    choose_reader,
    read_ranges,
    source_schema,
)
from freshet.format.record_batch import encode_batch
from freshet.testing.topics import create_topic

SCHEMA = source_schema(include_headers=True)
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")


def end_offsets(bootstrap, topic, partitions, isolation="read_uncommitted"):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def read_both(bootstrap, topic, spans, options=None, fail_on_data_loss=True):
    """The rows each reader yields for ``spans`` [(partition, start, end)], sorted the same way."""
    out = {}
    for reader in ("columnar", "librdkafka"):
        ranges = [TopicPartitionRange(topic, p, start, end, bootstrap, True, fail_on_data_loss, dict(options or {}),
                                      reader) for p, start, end in spans]
        rows = []
        for batch in read_ranges(ranges, SCHEMA):
            rows += batch.to_pylist()
        for row in rows:
            row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
        out[reader] = sorted(rows, key=lambda r: (r["partition"], r["offset"]))
    return out["columnar"], out["librdkafka"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_both_readers_read_the_same_records_of_every_codec(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
    for i in range(3000):
        producer.produce(topic_name, value=b"value %d " % i * (i % 7), key=None if i % 4 == 0 else b"k%d" % i,
                         partition=i % 3, headers=[("h", b"%d" % i), ("empty", None)] if i % 5 == 0 else None)
    producer.flush(30)
    columnar, librdkafka = read_both(broker.bootstrap, topic_name, [(0, 0, 1000), (1, 17, 933), (2, 500, 501)])
    assert len(columnar) == 1000 + 916 + 1
    assert columnar == librdkafka
    assert [(r["partition"], r["offset"]) for r in columnar][:2] == [(0, 0), (0, 1)]
    assert any(r["key"] is None for r in columnar) and any(r["headers"] for r in columnar)


def test_both_readers_skip_aborted_transactions_under_read_committed(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-tx"})
    txn.init_transactions(30)
    for round_ in range(4):
        txn.begin_transaction()
        for i in range(50):
            txn.produce(topic_name, b"txn %d %d" % (round_, i), partition=i % 2)
        plain.produce(topic_name, b"plain %d" % round_, partition=round_ % 2)
        plain.flush(10)
        txn.flush(10)  # an abort drops what was not sent: the aborted records are to be in the log
        (txn.commit_transaction if round_ % 2 else txn.abort_transaction)(30)
    ends = end_offsets(broker.bootstrap, topic_name, 2)
    spans = [(p, 0, ends[p]) for p in range(2)]
    committed, librdkafka = read_both(broker.bootstrap, topic_name, spans, {"isolation.level": "read_committed"})
    assert committed == librdkafka
    values = sorted(r["value"] for r in committed)
    assert values == sorted([b"plain %d" % r for r in range(4)] + [b"txn %d %d" % (r, i) for r in (1, 3)
                                                                    for i in range(50)])
    uncommitted, librdkafka = read_both(broker.bootstrap, topic_name, spans, {"isolation.level": "read_uncommitted"})
    assert uncommitted == librdkafka and len(uncommitted) == 4 + 200


def test_both_readers_give_log_append_time(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i in range(20):
        producer.produce(topic_name, b"%d" % i, timestamp=1_000_000 + i)
    producer.flush(10)
    columnar, librdkafka = read_both(broker.bootstrap, topic_name, [(0, 0, 20)])
    assert columnar == librdkafka
    assert {r["timestampType"] for r in columnar} == {1}
    assert min(r["timestamp"].timestamp() for r in columnar) > 1.7e9  # the broker's clock, not the producer's


@pytest.mark.parametrize("topic_codec, producer_codec", [("zstd", "none"), ("uncompressed", "lz4"), ("gzip", "snappy")])
def test_a_topics_compression_type_recompresses_what_producers_send(broker, topic_name, topic_codec, producer_codec):
    """compression.type on the topic (set at creation, then changed live): batches are stored in its codec
    whatever the producer sent (checked on the raw fetch), and both readers read the same records."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from freshet.testing.raw_kafka import RawConnection

    admin = create_topic(broker.bootstrap, topic_name, 1, {"compression.type": topic_codec})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": producer_codec, "linger.ms": 5})

    def send(start):
        for i in range(start, start + 500):
            producer.produce(topic_name, b"value %d " % i * 3, key=b"k%d" % i, headers=[("n", b"%d" % i)])
        producer.flush(10)

    send(0)
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    send(500)
    with RawConnection(broker.bootstrap) as conn:
        response = conn.request(1, 11, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
                                         "topics": [{"topic": topic_name, "partitions": [
                                             {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 24}]}],
                                         "forgotten_topics_data": []})
    records = bytes(response.responses[0].partitions[0].records)
    codecs, pos = {}, 0  # base offset -> codec of each stored batch
    while pos + 61 <= len(records):
        codecs[int.from_bytes(records[pos:pos + 8], "big")] = records[pos + 22] & 0x07
        pos += int.from_bytes(records[pos + 8:pos + 12], "big") + 12
    wanted = {"uncompressed": 0, "gzip": 1, "zstd": 4}[topic_codec]
    assert {c for base, c in codecs.items() if base < 500} == {wanted}
    assert {c for base, c in codecs.items() if base >= 500} == {4}
    columnar, librdkafka = read_both(broker.bootstrap, topic_name, [(0, 0, 1000)])
    assert columnar == librdkafka and [r["value"] for r in columnar] == [b"value %d " % i * 3 for i in range(1000)]


def test_deleted_records_fail_the_read_or_are_skipped(broker, topic_name):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce(topic_name, b"%d" % i)
    producer.flush(10)
    tp = TopicPartition(topic_name, 0, 60)
    admin.delete_records([tp])[tp].result(10)
    for reader in ("columnar", "librdkafka"):
        ranges = [TopicPartitionRange(topic_name, 0, 10, 100, broker.bootstrap, True, True, {}, reader)]
        with pytest.raises(RuntimeError, match=r"offsets 10\.\.59 .* were deleted"):
            list(read_ranges(ranges, SCHEMA))
    columnar, librdkafka = read_both(broker.bootstrap, topic_name, [(0, 10, 100)], fail_on_data_loss=False)
    assert columnar == librdkafka and [r["offset"] for r in columnar] == list(range(60, 100))


def test_settings_the_columnar_reader_does_not_cover_go_to_librdkafka():
    assert choose_reader("auto", {}) == "columnar"
    assert choose_reader("auto", {"isolation.level": "read_committed"}) == "columnar"
    assert choose_reader("auto", {"security.protocol": "SASL_SSL"}) == "librdkafka"
    assert choose_reader("auto", {"queued.min.messages": "5"}) == "librdkafka"
    assert choose_reader("librdkafka", {}) == "librdkafka"
    from freshet.spark.offsets import SourceError

    with pytest.raises(SourceError, match="reader=columnar cannot serve this read: security.protocol SASL_SSL"):
        choose_reader("columnar", {"security.protocol": "SASL_SSL"})
    with pytest.raises(SourceError, match="option reader takes auto, columnar, librdkafka"):
        choose_reader("fast", {})
    with pytest.raises(ColumnarUnavailable):
        RangeReader("127.0.0.1:1", [], ARROW_SCHEMA, options={"sasl.mechanism": "PLAIN"})


def test_a_broker_that_is_not_there_is_a_clear_error(topic_name):
    from freshet.client.columnar import ReadError
    from freshet.local.broker import free_port

    reader = RangeReader(f"127.0.0.1:{free_port()}", [ReadRange(topic_name, 0, 0, 10)], ARROW_SCHEMA)
    with pytest.raises(ReadError, match="no broker answered a metadata request: cannot reach the broker"):
        list(reader.batches())


def test_a_topic_that_does_not_exist_is_a_clear_error(broker, topic_name):
    from freshet.client.columnar import ReadError

    reader = RangeReader(broker.bootstrap, [ReadRange(topic_name, 0, 0, 10)], ARROW_SCHEMA)
    with pytest.raises(ReadError, match=f"{topic_name}-0 has no leader"):
        list(reader.batches())


def test_a_header_key_that_is_not_utf8_reads_as_java_reads_it(broker, topic_name):
    """Kafka's header key is a UTF-8 string; a producer that writes other bytes gets them read with U+FFFD in
    place of each bad sequence (Java's new String(bytes, UTF_8)) by the columnar reader, not a failed read.
    (confluent-kafka's Message.headers() fails on such a key with a SystemError and the process may crash
    later: reader=librdkafka cannot read these records.)"""
    from freshet.testing.raw_kafka import RawConnection, produce

    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        produce(conn, topic_name, 0, encode_batch([(b"k", b"v", 1_700_000_000_000,
                                                    (("ok", b"1"), ("bad\udcff", b"2")))]))
    rows = []
    for batch in read_ranges([TopicPartitionRange(topic_name, 0, 0, 1, broker.bootstrap, True, True, {}, "columnar")],
                             SCHEMA):
        rows += batch.to_pylist()
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [[("ok", b"1"), ("bad\ufffd", b"2")]]

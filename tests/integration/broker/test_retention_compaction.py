"""Retention and compaction enforced by the broker's cleaner, seen by real consumers."""

import random
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client import consumer_config
from freshet.local import BrokerProcess
from freshet.testing.polling import wait_for


@pytest.fixture
def cleaning_broker(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--cleaner-interval-ms", "200"]) as b:
        yield b


def read_from_zero(bootstrap, topic):
    consumer = Consumer(consumer_config(bootstrap))
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = consumer.consume(1000, 0.5)
        out += [m for m in batch if m.error() is None]
        if out and out[-1].offset() >= high - 1:
            break
        if not batch and consumer.position([TopicPartition(topic, 0)])[0].offset >= high:
            break
    consumer.close()
    return out


def test_retention_ms_deletes_old_segments_and_consumers_reset(cleaning_broker):
    admin = AdminClient({"bootstrap.servers": cleaning_broker.bootstrap})
    admin.create_topics([NewTopic("short-lived", 1, config={"retention.ms": "60000", "segment.bytes": "2000"})])[
        "short-lived"].result(10)
    producer = Producer({"bootstrap.servers": cleaning_broker.bootstrap, "linger.ms": 0})
    old = int(time.time() * 1000) - 3_600_000
    for i in range(200):
        producer.produce("short-lived", b"old-%d" % i, timestamp=old, partition=0)
        producer.flush(10)
    for i in range(5):
        producer.produce("short-lived", b"new-%d" % i, partition=0)
    producer.flush(10)
    probe = Consumer(consumer_config(cleaning_broker.bootstrap))
    wait_for(lambda: probe.get_watermark_offsets(TopicPartition("short-lived", 0), timeout=10)[0] > 150,
             timeout=30, what="log start offset to move past the expired segments")
    low, high = probe.get_watermark_offsets(TopicPartition("short-lived", 0), timeout=10)
    probe.close()
    assert high == 205
    values = [m.value() for m in read_from_zero(cleaning_broker.bootstrap, "short-lived")]
    assert values[0] != b"old-0" and values[-5:] == [b"new-%d" % i for i in range(5)]


def test_compacted_topic_read_from_zero_equals_latest_state(cleaning_broker):
    admin = AdminClient({"bootstrap.servers": cleaning_broker.bootstrap})
    admin.create_topics([NewTopic("table", 1, config={"cleanup.policy": "compact", "segment.bytes": "4000",
                                                      "delete.retention.ms": "0"})])["table"].result(10)
    producer = Producer({"bootstrap.servers": cleaning_broker.bootstrap, "linger.ms": 2})
    rng = random.Random(11)
    state: dict[bytes, bytes] = {}
    for i in range(3000):
        key = b"row-%d" % rng.randrange(150)
        if rng.random() < 0.2:
            producer.produce("table", None, key, partition=0)
            state.pop(key, None)
        else:
            value = b"v%d" % i
            producer.produce("table", value, key, partition=0)
            state[key] = value
    producer.flush(30)
    # a final round of writes to other keys closes the segments holding the state above
    for i in range(200):
        producer.produce("table", b"x", b"filler-%d" % (i % 5), partition=0)
    producer.flush(30)
    for key in [b"filler-%d" % i for i in range(5)]:
        state[key] = b"x"

    def compacted():
        records = read_from_zero(cleaning_broker.bootstrap, "table")
        return len(records) < 1000 and records

    wait_for(compacted, timeout=30, what="compaction")
    records = read_from_zero(cleaning_broker.bootstrap, "table")
    rebuilt: dict[bytes, bytes] = {}
    for m in records:
        if m.value() is None:
            rebuilt.pop(m.key(), None)
        else:
            rebuilt[m.key()] = m.value()
    assert rebuilt == state
    offsets = [m.offset() for m in records]
    assert offsets == sorted(offsets)


def test_keyless_record_refused_on_compacted_topic(cleaning_broker):
    admin = AdminClient({"bootstrap.servers": cleaning_broker.bootstrap})
    admin.create_topics([NewTopic("keyed-only", 1, config={"cleanup.policy": "compact"})])["keyed-only"].result(10)
    producer = Producer({"bootstrap.servers": cleaning_broker.bootstrap, "retries": 0})
    errors = []
    producer.produce("keyed-only", b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == 87  # INVALID_RECORD


def test_min_compaction_lag_keeps_young_records_uncompacted(cleaning_broker):
    """min.compaction.lag.ms=1h: the hour-old updates are compacted to one per key, the last minutes' updates
    (segments whose newest record is younger than the lag) all stay readable, in the same cleaner passes."""
    admin = AdminClient({"bootstrap.servers": cleaning_broker.bootstrap})
    admin.create_topics([NewTopic("lagging", 1, config={"cleanup.policy": "compact", "segment.bytes": "1000",
                                                        "min.compaction.lag.ms": "3600000"})])["lagging"].result(10)
    producer = Producer({"bootstrap.servers": cleaning_broker.bootstrap, "linger.ms": 0})
    old = int(time.time() * 1000) - 2 * 3_600_000
    for i in range(100):
        producer.produce("lagging", b"old-%d" % i, b"k%d" % (i % 5), timestamp=old, partition=0)
        producer.flush(10)
    for i in range(60):  # the first, nearly a segment long, starts a segment: no segment holds both ages
        producer.produce("lagging", b"young-%d" % i + (b"." * 900 if i == 0 else b""), b"k%d" % (i % 5),
                         partition=0)
        producer.flush(10)

    def values():
        return [m.value().rstrip(b".") for m in read_from_zero(cleaning_broker.bootstrap, "lagging")]

    wait_for(lambda: len([v for v in values() if v.startswith(b"old-")]) <= 5, timeout=60,
             what="the hour-old updates compacted")
    kept = values()
    assert [v for v in kept if v.startswith(b"old-")] == [b"old-%d" % i for i in range(95, 100)]
    assert [v for v in kept if v.startswith(b"young-")] == [b"young-%d" % i for i in range(60)]

"""What was acknowledged survives restarts and crashes; idempotent producers carry on."""

import glob
import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import consumer_config, producer_config
from freshet.testing.topics import create_topic


def read_all(bootstrap, topic, partitions):
    consumer = Consumer(consumer_config(bootstrap))
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p]])
    got = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            assert m.error() is None
            got[m.partition()].append((m.offset(), m.value()))
    consumer.close()
    return got


def produce_numbered(bootstrap, topic, start, count, partitions, acked, errors, extra=None, pace=0.0):
    producer = Producer(producer_config(bootstrap, {"message.timeout.ms": 60000, **(extra or {})}))

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err)

    for i in range(start, start + count):
        producer.produce(topic, b"%08d" % i, partition=i % partitions, on_delivery=on_delivery)
        producer.poll(0)
        if pace and i % 1000 == 0:
            time.sleep(pace)
    producer.flush(90)
    return producer


def test_clean_restart_keeps_every_record(own_broker, topic_name):
    create_topic(own_broker.bootstrap, topic_name, 3)
    acked, errors = [], []
    produce_numbered(own_broker.bootstrap, topic_name, 0, 3000, 3, acked, errors)
    assert not errors and len(acked) == 3000
    own_broker.restart()
    got = read_all(own_broker.bootstrap, topic_name, 3)
    assert sorted(v for recs in got.values() for _, v in recs) == sorted(acked)
    for recs in got.values():
        assert [o for o, _ in recs] == list(range(len(recs)))


def test_idempotent_producer_carries_on_across_restart(own_broker, topic_name):
    create_topic(own_broker.bootstrap, topic_name, 2)
    producer = Producer(producer_config(own_broker.bootstrap, {"message.timeout.ms": 60000}))
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(500):
        producer.produce(topic_name, b"%05d" % i, partition=i % 2, on_delivery=on_delivery)
    producer.flush(30)
    own_broker.restart()
    for i in range(500, 1000):
        producer.produce(topic_name, b"%05d" % i, partition=i % 2, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert errors == []
    got = read_all(own_broker.bootstrap, topic_name, 2)
    values = [v for recs in got.values() for _, v in recs]
    assert sorted(values) == [b"%05d" % i for i in range(1000)]  # none lost, none twice
    for p, recs in got.items():
        assert [v for _, v in recs] == [b"%05d" % i for i in range(p, 1000, 2)]


def test_sigkill_mid_produce_keeps_acknowledged_records_once(own_broker, topic_name):
    create_topic(own_broker.bootstrap, topic_name, 6)
    acked, errors = [], []
    killed_at = []

    def kill_then_restart():
        # once the first 2,000 records are acknowledged (not after a fixed time: a busy machine may not have
        # acknowledged any yet), then start again a second later while the producer retries
        deadline = time.monotonic() + 120
        while len(acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.01)
        own_broker.kill()
        killed_at.append(len(acked))
        time.sleep(1.0)
        own_broker.start()

    killer = threading.Thread(target=kill_then_restart)
    killer.start()
    produce_numbered(own_broker.bootstrap, topic_name, 0, 60000, 6, acked, errors, pace=0.05)
    killer.join()
    assert 2000 <= killed_at[0] < 60000, "the kill did not land mid-produce"
    got = read_all(own_broker.bootstrap, topic_name, 6)
    stored = [v for recs in got.values() for _, v in recs]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    assert set(acked) <= set(stored), "an acknowledged record was lost"
    for p, recs in got.items():
        numbers = [int(v) for _, v in recs]
        assert numbers == sorted(numbers), f"partition {p} out of order"


def test_torn_tail_is_cut_on_start_and_nothing_acknowledged_is_lost(own_broker, topic_name):
    create_topic(own_broker.bootstrap, topic_name, 1)
    acked, errors = [], []
    produce_numbered(own_broker.bootstrap, topic_name, 0, 1000, 1, acked, errors)
    own_broker.kill()
    [segment] = glob.glob(os.path.join(own_broker.data_dir, "topics", topic_name, "0", "*.log"))
    size = os.path.getsize(segment)
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x03\xe8\x00\x00\x01\x00garbage-of-a-torn-write")
    own_broker.start()
    got = read_all(own_broker.bootstrap, topic_name, 1)[0]
    assert [v for _, v in got] == sorted(acked)
    assert os.path.getsize(segment) == size
    with open(own_broker.log_path, "rb") as log:
        assert b"cut" in log.read()
    acked2 = []
    produce_numbered(own_broker.bootstrap, topic_name, 1000, 10, 1, acked2, errors)
    assert not errors and len(read_all(own_broker.bootstrap, topic_name, 1)[0]) == 1010

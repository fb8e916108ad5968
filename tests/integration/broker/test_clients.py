"""Real Kafka clients against a real broker process: confluent-kafka, kcat, kafka-python."""

import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions

from freshet.client import consumer_config, producer_config


def read_partition(bootstrap, topic, partition, start=0, until=None):
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(topic, partition, start)])
    end = until if until is not None else consumer.get_watermark_offsets(TopicPartition(topic, partition))[1]
    out = []
    deadline = time.monotonic() + 60
    while (not out or out[-1].offset() + 1 < end) and end > start and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            assert m.error() is None, m.error()
            out.append(m)
    consumer.close()
    return out


def test_confluent_100k_keyed_records_read_back_in_partition_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 6)
    producer = Producer(producer_config(broker.bootstrap))
    delivered = {}

    def on_delivery(err, msg):
        assert err is None, err
        delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for i in range(100_000):
        key = b"user-%d" % (i % 997)
        producer.produce(topic_name, b"event-%d" % i, key, on_delivery=on_delivery)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert len(delivered) == 100_000
    per_key_order = {}
    total = 0
    for p in range(6):
        records = read_partition(broker.bootstrap, topic_name, p)
        assert [m.offset() for m in records] == list(range(len(records)))
        for m in records:
            assert delivered[(p, m.offset())] == (m.key(), m.value())
            # records of one key stay in the order they were produced
            n = int(m.value().split(b"-")[1])
            assert per_key_order.get(m.key(), -1) < n
            per_key_order[m.key()] = n
        total += len(records)
    assert total == 100_000
    assert len([p for p in range(6) if read_partition(broker.bootstrap, topic_name, p, until=1)]) == 6


def test_read_by_timestamp(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer(producer_config(broker.bootstrap))
    base = 1_700_000_000_000
    for i in range(1000):
        producer.produce(topic_name, b"%d" % i, timestamp=base + i * 1000, partition=0)
    producer.flush(30)
    consumer = Consumer(consumer_config(broker.bootstrap))
    [found] = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 500_500)], timeout=10)
    assert found.offset == 501
    [past] = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 10_000_000)], timeout=10)
    assert past.offset == -1  # no record that late: the end, as Kafka answers
    consumer.assign([found])
    msg = consumer.consume(1, 10)[0]
    assert msg.value() == b"501" and msg.timestamp()[1] == base + 501_000
    consumer.close()


def test_admin_describe_configs_reports_every_config(broker, topic_name):
    admin = create_topic(broker.bootstrap, topic_name, 2, {"retention.ms": "60000", "cleanup.policy": "compact"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "60000" and not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == str(1 << 30) and configs["segment.bytes"].is_default
    for name in ("retention.bytes", "max.message.bytes", "segment.ms", "delete.retention.ms"):
        assert name in configs
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions) == 4
    admin.delete_topics([topic_name])[topic_name].result(10)
    assert topic_name not in admin.list_topics(timeout=5).topics


def test_kcat_metadata_produce_consume(broker, topic_name, kcat):
    create_topic(broker.bootstrap, topic_name, 3)
    listing = subprocess.run([kcat, "-b", broker.bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert listing.returncode == 0, listing.stderr
    assert f'topic "{topic_name}" with 3 partitions' in listing.stdout
    lines = "\n".join(f"k{i}:v{i}" for i in range(500)) + "\n"
    produced = subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", topic_name, "-K", ":"],
                              input=lines, capture_output=True, text=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e",
                               "-q", "-f", "%k=%s\n"], capture_output=True, text=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(f"k{i}=v{i}" for i in range(500))


def test_kafka_python_round_trip(broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    create_topic(broker.bootstrap, topic_name, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    metas = [producer.send(topic_name, b"value-%d" % i, key=b"k", partition=1).get(10) for i in range(50)]
    producer.close()
    assert [m.offset for m in metas] == list(range(50))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False)
    tp = KTopicPartition(topic_name, 1)
    consumer.assign([tp])
    consumer.seek(tp, 10)
    got = [m for _, m in zip(range(40), consumer)]
    consumer.close()
    assert [(m.offset, m.value) for m in got] == [(i, b"value-%d" % i) for i in range(10, 50)]


import pytest  # noqa: E402

from freshet.testing.topics import create_topic


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_stored_as_sent_and_found_by_timestamp(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer(producer_config(broker.bootstrap, {"compression.type": codec, "linger.ms": 50}))
    base = 1_600_000_000_000
    for i in range(300):
        producer.produce(topic_name, b"value %d " % i * 5, timestamp=base + i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(consumer_config(broker.bootstrap))
    [found] = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 123)], timeout=10)
    assert found.offset == 123  # the record inside a compressed batch, not the batch start
    consumer.close()
    records = read_partition(broker.bootstrap, topic_name, 0)
    assert [m.value() for m in records] == [b"value %d " % i * 5 for i in range(300)]

"""OffsetForLeaderEpoch: where epoch 0 (the only one a one-node broker has) ends, as a consumer validating its
position after a restart asks (KIP-320), and the answers for epochs the broker never had."""

import time

from confluent_kafka import Consumer, Producer

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


def ask(conn, topic, *partitions, version=4):
    response = conn.request(23, version, {"replica_id": -2, "topics": [{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch} for p, current, epoch in partitions]}]})
    return [(r.partition, r.error_code.name, r.leader_epoch, r.end_offset) for r in response.topics[0].partitions]


def test_epoch_zero_ends_at_the_high_watermark_and_others_are_unknown(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(7):
        producer.produce(topic_name, b"%d" % i, partition=1)
    producer.flush(10)
    with RawConnection(broker.bootstrap) as conn:
        for version in (2, 3, 4):
            assert ask(conn, topic_name, (0, -1, 0), (1, 0, 0), (1, -1, 3), (1, 5, 0), (9, -1, 0),
                       version=version) == [
                (0, "none", 0, 0), (1, "none", 0, 7), (1, "none", -1, -1), (1, "unknown_leader_epoch", -1, -1),
                (9, "unknown_topic_or_partition", -1, -1)]


def test_a_consumer_resumes_from_its_committed_offsets_with_epochs_validated(broker, topic_name):
    """librdkafka commits offsets with their leader epoch and, on resuming, checks them with
    OffsetForLeaderEpoch: the answer must not look like a truncated log (no reset, nothing skipped)."""
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic_name, b"%d" % i)
    producer.flush(10)
    config = {"bootstrap.servers": broker.bootstrap, "group.id": topic_name, "auto.offset.reset": "latest",
              "enable.auto.commit": False}

    def take(n):
        consumer = Consumer(config)
        consumer.subscribe([topic_name])
        got, deadline = [], time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(int(m.value()))
                if len(got) == n:
                    consumer.commit(m, asynchronous=False)
        consumer.close()
        return got

    first = Consumer(config)
    first.subscribe([topic_name])
    from confluent_kafka import TopicPartition
    first.commit(offsets=[TopicPartition(topic_name, 0, 5, leader_epoch=0)], asynchronous=False)
    first.close()
    assert take(10) == list(range(5, 15))
    assert take(5) == list(range(15, 20))

"""Consumers that long-poll for 30 s (fetch.wait.max.ms) get what a transaction's end makes readable when it
ends, not when their long poll runs out: read_committed after a commit, after an abort then a commit, and a
fetch that waits for fetch.min.bytes over several partitions. A broker that failed to wake them would leave
the records undelivered until the 30 s were over; each test gives up well before that (nothing is timed)."""

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.testing.topics import create_topic

LONG_POLL_MS = 30_000
DELIVERED_WITHIN_S = 20  # before the long poll would have ended


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def long_polling_consumer(bootstrap: str, topic: str, partitions: int, **extra) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": LONG_POLL_MS, **extra})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def delivered(consumer: Consumer, count: int) -> list[bytes]:
    """Up to ``count`` values; gives up when DELIVERED_WITHIN_S passes with nothing new."""
    values: list[bytes] = []
    while len(values) < count:
        batch = consumer.consume(count - len(values), DELIVERED_WITHIN_S)
        if not batch:
            break
        for message in batch:
            assert message.error() is None, message.error()
            values.append(message.value())
    return values


@pytest.mark.parametrize("abort_first", [False, True], ids=["commit", "abort-then-commit"])
def test_a_commit_reaches_a_read_committed_consumer_long_polling_for_30_s(broker, topic_name, abort_first):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    consumer = long_polling_consumer(broker.bootstrap, topic_name, 1)
    try:
        for i in range(4):  # each round the consumer is already in its long poll when the transactions end
            if abort_first:  # the ABORT marker moves the last stable offset too; nothing of it is delivered
                producer.begin_transaction()
                producer.produce(topic_name, b"aborted%d" % i, partition=0)
                producer.flush(10)
                producer.abort_transaction(30)
            producer.begin_transaction()
            producer.produce(topic_name, b"kept%d" % i, partition=0)
            producer.commit_transaction(30)
            assert delivered(consumer, 1) == [b"kept%d" % i]
    finally:
        consumer.close()


def test_a_fetch_waiting_for_min_bytes_over_partitions_gets_them_once_they_add_up(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    value = b"x" * 1000
    # one partition's record is not enough for the fetch to answer; all three together are
    consumer = long_polling_consumer(broker.bootstrap, topic_name, 3, **{"fetch.min.bytes": 2500})
    try:
        # librdkafka may start fetching before all three assigned partitions are active: a first Fetch naming one
        # of them waits out its 30 s for bytes that only all three add up to (as on any Kafka broker; a fresh-clone
        # run failed once on it). Each partition first gets enough on its own, so whatever that first Fetch names
        # is answered, and the next ones name all three.
        producer.begin_transaction()
        for p in range(3):
            for i in range(3):
                producer.produce(topic_name, value, key=b"w%d-%d" % (p, i), partition=p)
        producer.commit_transaction(30)
        assert len(delivered(consumer, 9)) == 9
        for round_ in range(3):
            producer.begin_transaction()
            for p in range(3):
                producer.produce(topic_name, value, key=b"%d-%d" % (round_, p), partition=p)
            producer.commit_transaction(30)
            assert len(delivered(consumer, 3)) == 3
    finally:
        consumer.close()

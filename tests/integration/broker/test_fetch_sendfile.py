"""Record sets go from the segment files to the socket with sendfile: large responses to a slow reader
(a socket that fills, so sends go partial and continue when it drains) arrive whole and in order.
(That a region survives its segment's deletion: tests/unit/log/test_read_region.py.)"""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_large_fetches_to_a_slow_reader_arrive_whole_and_in_order(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "acks": "all"})
    n = 40_000
    for i in range(n):
        producer.produce(topic_name, value=b"%08d" % i + b"x" * 200, partition=i % 2)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name, "enable.auto.commit": False,
                         "socket.receive.buffer.bytes": 4096,  # the broker's sends fill it: partial sendfiles
                         "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 4 << 20})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    seen: dict[int, list[int]] = {0: [], 1: []}
    received = 0
    deadline = time.monotonic() + 180
    while received < n and time.monotonic() < deadline:
        for msg in consumer.consume(5000, 1.0):
            assert msg.error() is None
            value = msg.value()
            assert value[8:] == b"x" * 200
            seen[msg.partition()].append(int(value[:8]))
            received += 1
            if received % 1000 == 0:
                # read slowly now and then: once every 1000 records (counting one partition's would sleep on
                # every record of the other once the first is done, 10 ms each)
                time.sleep(0.01)
    consumer.close()
    assert seen[0] == list(range(0, n, 2)) and seen[1] == list(range(1, n, 2))


def test_the_benchmarks_raw_fetcher_reads_every_record_once(broker, topic_name):
    """broker_throughput.py's fetch-path measure (raw Fetch requests, offsets moved by batch headers) reads back
    exactly what was produced, across responses that end inside a partition's log."""
    from freshet.testing.raw_kafka import pull_fetches

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 3)])[topic_name].result(30)
    # batches of at most 16 KB: a response's per-partition share (64 KB below) ends at a batch boundary inside the
    # log, never on one batch larger than the limit (which a broker returns whole)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 16384})
    n = 30_000
    for i in range(n):
        producer.produce(topic_name, value=b"v" * 100, partition=i % 3)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    pulled = pull_fetches(broker.bootstrap, topic_name, 3, n, partition_max_bytes=64 << 10, max_bytes=128 << 10)
    assert pulled["records"] == n
    assert pulled["fetches"] >= n * 100 // (128 << 10)  # ~1 MB per partition, at most 128 KB a response

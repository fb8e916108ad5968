"""Broker behaviour seen through the protocol: limits, long-poll, configs applied, cluster info."""

import glob
import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from freshet.client import consumer_config
from freshet.format.record_batch import decode_records, encode_batch, iter_batches
from freshet.local import BrokerProcess
from freshet.testing.polling import wait_for
from freshet.testing.raw_kafka import RawConnection, fetch, produce
from freshet.testing.topics import create_topic


def test_fetch_max_bytes_returns_whole_batches_within_the_limit(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    batch = encode_batch([(b"k", b"x" * 1000, 1)])
    with RawConnection(broker.bootstrap) as conn:
        for _ in range(10):
            assert produce(conn, topic_name, 0, batch).error_code == 0
        one = fetch(conn, topic_name, 0, 0, max_bytes=10)  # smaller than one batch: still one whole batch
        assert len(list(iter_batches(one.records))) == 1
        three = fetch(conn, topic_name, 0, 0, max_bytes=len(batch) * 3 + 100)
        assert [h.base_offset for h, _ in iter_batches(three.records)] == [0, 1, 2]
        middle = fetch(conn, topic_name, 0, 7)
        assert [r.offset for _, b in iter_batches(middle.records) for r in decode_records(b)] == [7, 8, 9]


def test_long_poll_fetch_answers_with_records_produced_while_it_waits(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    result = {}

    def waiting_fetch():
        with RawConnection(broker.bootstrap, timeout=30) as conn:
            response = conn.request(1, 11, {
                "replica_id": -1, "max_wait": 20000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic_name, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                 "fetch_offset": 0, "log_start_offset": -1,
                                                                 "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            result["records"] = bytes(response.responses[0].partitions[0].records or b"")

    waiter = threading.Thread(target=waiting_fetch)
    waiter.start()
    time.sleep(0.3)  # let the fetch park; the assertion below does not depend on this
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic_name, 0, encode_batch([(b"k", b"arrived-later", 1)])).error_code == 0
    waiter.join(30)
    assert [r.value for _, b in iter_batches(result["records"]) for r in decode_records(b)] == [b"arrived-later"]


def test_acks_zero_and_acks_one_are_stored(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic_name, 0, encode_batch([(b"k", b"zero", 1)]), acks=0) is None
        assert produce(conn, topic_name, 0, encode_batch([(b"k", b"one", 1)]), acks=1).base_offset == 1
        wait_for(lambda: fetch(conn, topic_name, 0, 0).high_watermark >= 2, 10, "the high watermark to reach 2",
                 0.01)
        values = [r.value for _, b in iter_batches(fetch(conn, topic_name, 0, 0).records) for r in decode_records(b)]
    assert values == [b"zero", b"one"]


def test_segment_bytes_config_rolls_segments_and_reads_cross_them(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "20000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(2000):
        producer.produce(topic_name, b"%06d" % i + b"." * 90, partition=0)
    assert producer.flush(30) == 0
    segments = glob.glob(os.path.join(broker.data_dir, "topics", topic_name, "0", "*.log"))
    assert len(segments) > 5
    assert all(os.path.getsize(s) <= 20000 for s in segments)
    consumer = Consumer(consumer_config(broker.bootstrap))
    consumer.assign([TopicPartition(topic_name, 0, 1234)])
    got = []
    while len(got) < 766:
        got += [m.value()[:6] for m in consumer.consume(1000, 1) if m.error() is None]
    consumer.close()
    assert got == [b"%06d" % i for i in range(1234, 2000)]


def test_describe_cluster(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result(10)
    assert cluster.cluster_id == "freshet"
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]


def test_auto_create_is_off_by_default_and_a_switch(broker, tmp_path):
    with RawConnection(broker.bootstrap) as conn:
        md = conn.request(3, 12, {"topics": [{"name": "never-created", "topic_id": None}],
                                  "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--auto-create-topics", "--default-partitions",
                                                                "3"]) as auto:
        producer = Producer({"bootstrap.servers": auto.bootstrap})
        producer.produce("created-on-demand", b"v")
        assert producer.flush(30) == 0
        md = AdminClient({"bootstrap.servers": auto.bootstrap}).list_topics(timeout=10)
        assert len(md.topics["created-on-demand"].partitions) == 3

"""DescribeLogDirs as kafka-python's admin client asks it: the broker's one log directory, its disk's sizes, and
each partition's size on disk, for every topic or the ones named; topics that do not exist are left out."""

import os

from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


def sizes(result) -> dict:
    (broker,) = result
    (log_dir,) = broker["log_dirs"]
    return {(t["name"], p["partition_index"]): p["partition_size"] for t in log_dir["topics"] for p in t["partitions"]}


def test_partition_sizes_grow_with_what_is_written(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        before = sizes(admin.describe_log_dirs())
        assert before[(topic_name, 0)] == before[(topic_name, 1)] == 0
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(100):
            producer.produce(topic_name, b"x" * 1000, partition=1)
        producer.flush(10)
        result = admin.describe_log_dirs()
        after = sizes(result)
        assert after[(topic_name, 0)] == 0 and after[(topic_name, 1)] > 100 * 1000
        (log_dir,) = result[0]["log_dirs"]
        assert log_dir["error_code"] == 0 and os.path.isdir(log_dir["log_dir"])
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    finally:
        admin.close()


def test_named_partitions_only_and_unknown_topics_left_out(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    with RawConnection(broker.bootstrap) as conn:
        for version in (1, 4):
            response = conn.request(35, version, {"topics": [
                {"topic": topic_name, "partitions": [2, 0, 9]}, {"topic": "no-such-topic", "partitions": [0]}]})
            assert response.error_code == 0 if version >= 3 else True
            (result,) = response.results
            assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(topic_name, [0, 2])]

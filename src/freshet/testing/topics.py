"""Creating the topics a test needs, through a real Kafka admin client."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client import admin_config


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> AdminClient:
    """Create ``name`` and wait until the broker has; returns the admin client for more."""
    admin = AdminClient(admin_config(bootstrap))
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(10)
    return admin


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
                timeout_s: float = 60.0) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record a reader of ``isolation`` sees from the start of each partition to the end
    it reaches (transaction markers take offsets, so this reads to the end instead of counting offsets)."""
    import time
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.partition.eof": True, "log_level": 0})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[tuple[bytes | None, bytes | None]] = []
    ended: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(ended) < partitions and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is not None:
                ended.add(m.partition())
            else:
                records.append((m.key(), m.value()))
    consumer.close()
    assert len(ended) == partitions, f"the reader never reached the end of {topic}"
    return records

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
    from freshet.client import reading

    consumer = reading.reader(bootstrap, {"isolation.level": isolation})
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        reading.read_to_end(consumer, [(topic, p, -2) for p in range(partitions)],
                            lambda m: records.append((m.key(), m.value())), timeout_s)
    finally:
        consumer.close()
    return records

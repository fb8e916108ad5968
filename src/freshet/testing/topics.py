"""Creating the topics a test needs, through a real Kafka admin client."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client import admin_config


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> AdminClient:
    """Create ``name`` and wait until the broker has; returns the admin client for more."""
    admin = AdminClient(admin_config(bootstrap))
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(10)
    return admin

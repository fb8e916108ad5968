"""Event-sourced applications and their projections announce themselves in the compacted topic
``__freshet_applications``, so the dashboard and the CLI can list them with a Kafka client alone.

Keys and values (JSON):

``application/{name}``            {"name", "events_topic", "commands_topic", "partitions", "aggregates": [...]}
``projection/{app}/{projection}`` {"application", "projection", "generation", "positions": {partition: next
                                  offset in the events topic}, "applied", "database", "updated_ms"}

A projection's position is where its reader stands in the events topic: past the transaction markers once
it has read to the end, so ``high watermark - position`` is its lag (0 when caught up).
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

from confluent_kafka import Producer

from .admin import TopicAdmin
from .errors import ClientError
from .config import producer_config
from .reading import read_to_end, reader

REGISTRY_TOPIC = "__freshet_applications"


def ensure_registry(bootstrap: str) -> None:
    TopicAdmin(bootstrap).ensure_topic(REGISTRY_TOPIC, 1, {"cleanup.policy": "compact"})


def application_record(name: str, events_topic: str, commands_topic: str, partitions: int,
                       aggregates: list[str]) -> tuple[bytes, bytes]:
    value = {"name": name, "events_topic": events_topic, "commands_topic": commands_topic,
             "partitions": partitions, "aggregates": sorted(aggregates)}
    return f"application/{name}".encode(), json.dumps(value).encode()


def projection_record(application: str, projection: str, generation: int, positions: dict[int, int],
                      applied: int, database_url: str) -> tuple[bytes, bytes]:
    value = {"application": application, "projection": projection, "generation": generation,
             "positions": {str(p): o for p, o in sorted(positions.items())}, "applied": applied,
             "database": redact(database_url), "updated_ms": int(time.time() * 1000)}
    return f"projection/{application}/{projection}".encode(), json.dumps(value).encode()


def redact(url: str) -> str:
    """A database URL without its password (the registry is readable by every client of the log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def announce(bootstrap: str, records: list[tuple[bytes, bytes]]) -> None:
    ensure_registry(bootstrap)
    producer = Producer(producer_config(bootstrap, {"log_level": 0}))
    for key, value in records:
        producer.produce(REGISTRY_TOPIC, value, key)
    if producer.flush(10):
        raise ClientError(f"{REGISTRY_TOPIC}: announcement not acknowledged in 10 s")


def read_registry(bootstrap: str, timeout_s: float = 10.0) -> tuple[dict[str, dict], dict[tuple[str, str], dict]]:
    """(applications by name, projections by (application, projection)) as last announced."""
    applications: dict[str, dict] = {}
    projections: dict[tuple[str, str], dict] = {}
    if REGISTRY_TOPIC not in TopicAdmin(bootstrap).list_topics():
        return applications, projections

    def handle(m) -> None:
        kind, _, rest = m.key().decode().partition("/")
        value = json.loads(m.value()) if m.value() is not None else None
        if kind == "application":
            if value is None:
                applications.pop(rest, None)
            else:
                applications[rest] = value
        elif kind == "projection":
            app, _, name = rest.partition("/")
            if value is None:
                projections.pop((app, name), None)
            else:
                projections[(app, name)] = value

    consumer = reader(bootstrap)
    try:
        read_to_end(consumer, [(REGISTRY_TOPIC, 0, -2)], handle, timeout_s)
    finally:
        consumer.close()
    return applications, projections

"""Ingest servers (``freshet ingest serve``) announce their endpoints and counters in the compacted topic
``__freshet_ingest`` every two seconds, so the dashboard can show them with a Kafka client alone.

Key ``ingest/{server}``; value (JSON) ``{"server", "max_buffered", "buffered", "log_reachable",
"endpoints": {name: {protocol, address, topic, policy, received, delivered, failed, rejected, dropped,
malformed, buffered, ...}}, "updated_ms"}``. A server that stops cleanly writes a tombstone.
"""

from __future__ import annotations

import json

from .admin import TopicAdmin
from .reading import read_to_end, reader

INGEST_TOPIC = "__freshet_ingest"


def ensure_ingest_topic(bootstrap: str) -> None:
    TopicAdmin(bootstrap).ensure_topic(INGEST_TOPIC, 1, {"cleanup.policy": "compact"})


def ingest_record(server: str, stats: dict | None) -> tuple[bytes, bytes | None]:
    return f"ingest/{server}".encode(), None if stats is None else json.dumps({"server": server, **stats}).encode()


class IngestView:
    """The servers as last announced, kept by one consumer that reads only what is new at each ``refresh``
    (the dashboard calls it every second)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.servers: dict[str, dict] = {}
        self._consumer = None
        self._position = -2

    def refresh(self, timeout_s: float = 5.0) -> dict[str, dict]:
        if self._consumer is None:
            if INGEST_TOPIC not in TopicAdmin(self.bootstrap).list_topics():
                return {}
            self._consumer = reader(self.bootstrap)

        def handle(m) -> None:
            name = m.key().decode().removeprefix("ingest/")
            if m.value() is None:
                self.servers.pop(name, None)
            else:
                self.servers[name] = json.loads(m.value())

        ends = read_to_end(self._consumer, [(INGEST_TOPIC, 0, self._position)], handle, timeout_s)
        self._position = ends[(INGEST_TOPIC, 0)]
        return dict(self.servers)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

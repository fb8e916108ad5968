"""Definitions kept in a compacted topic: CEP rules (``__freshet_rules``) and stored search queries
(``__freshet_watches``). Key: the definition's name; value: JSON ``{"name", "text", "added_ms", ...}``;
removing one writes a tombstone. A running pipeline keeps a :class:`StoredDefinitions` and calls
``refresh`` between batches, so added and removed definitions take effect without a restart.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from .admin import TopicAdmin
from .errors import ClientError
from .config import producer_config
from .produce import flush_delivered
from .reading import read_to_end, reader

RULES_TOPIC = "__freshet_rules"
WATCHES_TOPIC = "__freshet_watches"


class StoredDefinitions:
    """The definitions as last written, read by one consumer that reads only what is new at each refresh."""

    def __init__(self, bootstrap: str, topic: str, overrides: dict | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.overrides = overrides or {}  # another user's SASL settings to read and write as (the dashboard's sign-in)
        self.definitions: dict[str, dict] = {}
        self._consumer = None
        self._position = -2
        self.refreshed_at = 0.0

    def ensure_topic(self) -> None:
        TopicAdmin(self.bootstrap).ensure_topic(self.topic, 1, {"cleanup.policy": "compact"})

    def refresh(self, timeout_s: float = 10.0) -> dict[str, dict]:
        """Read what was written since the last refresh. ``refreshed_at`` is when it started: every definition
        written before that moment is in ``definitions`` (a slow read does not make older changes look seen)."""
        asked = time.monotonic()
        if self._consumer is None:
            if self.topic not in TopicAdmin(self.bootstrap).list_topics():
                self.refreshed_at = asked
                return {}
            self._consumer = reader(self.bootstrap, self.overrides)

        def handle(m) -> None:
            name = m.key().decode()
            if m.value() is None:
                self.definitions.pop(name, None)
            else:
                self.definitions[name] = json.loads(m.value())

        ends = read_to_end(self._consumer, [(self.topic, 0, self._position)], handle, timeout_s)
        self._position = ends[(self.topic, 0)]
        self.refreshed_at = asked
        return dict(self.definitions)

    def _write(self, records: list[tuple[str, bytes | None]]) -> None:
        self.ensure_topic()
        producer = Producer(producer_config(self.bootstrap, {"log_level": 0, **self.overrides}))
        failures: list[str] = []
        for key, value in records:
            producer.produce(self.topic, value, key.encode(),
                             on_delivery=lambda err, _m: failures.append(err.str()) if err else None)
            producer.poll(0)
        left = flush_delivered(producer, self.topic, 30)
        if failures or left:
            raise ClientError(f"could not write to {self.topic}: {failures[0] if failures else 'timed out'}")

    def put(self, name: str, text: str, **extra) -> dict:
        return self.put_many([(name, text)], **extra)[0]

    def put_many(self, definitions: list[tuple[str, str]], **extra) -> list[dict]:
        """Store several definitions with one producer."""
        now = int(time.time() * 1000)
        values = [{"name": name, "text": text, "added_ms": now, **extra} for name, text in definitions]
        self._write([(v["name"], json.dumps(v).encode()) for v in values])
        return values

    def remove(self, name: str) -> None:
        """Remove ``name``; ClientError if there is no such definition."""
        if name not in self.refresh():
            raise ClientError(f"no {name!r} in {self.topic}")
        self._write([(name, None)])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

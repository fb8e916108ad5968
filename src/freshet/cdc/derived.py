"""Derived systems kept in sync from change topics: a full-text search index and a cache.

Each consumes a compacted change topic (Debezium envelopes keyed by primary key; a tombstone or
an ``op: d`` deletes) from its own stored position, and stores that position atomically with the
data it applied (one SQLite transaction; one Redis MULTI/EXEC), so a restart after a crash applies
nothing twice and misses nothing. A new one started from offset 0 of a compacted topic rebuilds the
table exactly.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from freshet.client import consumer_config
from freshet.client.offsets import watermark_offsets


@dataclass
class ChangeRecord:
    partition: int
    offset: int
    key: str  # canonical JSON of the primary key
    row: dict | None  # the row after the change; None: the key was deleted


def read_changes(bootstrap: str, topic: str, positions: dict[int, int], until_end: bool = True,
                 idle_s: float = 1.0) -> Iterator[list[ChangeRecord]]:
    """Batches of change records from ``positions`` (partition -> next offset) to the current end."""
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0, "enable.partition.eof": True}))
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(md.partitions)
        ends = {p: watermark_offsets(consumer, TopicPartition(topic, p), 10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, positions.get(p, 0)) for p in partitions])
        done = {p for p in partitions if positions.get(p, 0) >= ends[p]}
        quiet_since = time.monotonic()
        while not (until_end and len(done) == len(partitions)):
            batch = []
            for m in consumer.consume(2000, 0.2):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                    continue
                key = json.dumps(json.loads(m.key()), sort_keys=True)
                row = None
                if m.value() is not None:
                    event = json.loads(m.value())
                    row = None if event.get("op") == "d" else event.get("after")
                batch.append(ChangeRecord(m.partition(), m.offset(), key, row))
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
            if batch:
                quiet_since = time.monotonic()
                yield batch
            elif not until_end and time.monotonic() - quiet_since > idle_s:
                return
    finally:
        consumer.close()


class DerivedSystem:
    """Applies a change topic from its own stored position (``positions``) in atomic batches (``apply``)."""

    topic: str

    def positions(self) -> dict[int, int]:
        raise NotImplementedError

    def apply(self, batch: list[ChangeRecord]) -> None:
        raise NotImplementedError

    def sync(self, bootstrap: str) -> int:
        """Apply everything up to the topic's current end; returns how many changes."""
        applied = 0
        for batch in read_changes(bootstrap, self.topic, self.positions()):
            self.apply(batch)
            applied += len(batch)
        return applied


class SearchIndex(DerivedSystem):
    """A SQLite FTS5 index over the text columns of one table's change topic."""

    def __init__(self, path: str, topic: str, text_columns: list[str]) -> None:
        self.path, self.topic, self.text_columns = path, topic, text_columns
        self.db = sqlite3.connect(path)
        self.db.executescript(
            "CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, row TEXT NOT NULL);"
            "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(key UNINDEXED, body);"
            "CREATE TABLE IF NOT EXISTS progress (topic TEXT, partition INTEGER, next_offset INTEGER, "
            "PRIMARY KEY (topic, partition));"
        )

    def positions(self) -> dict[int, int]:
        return {p: o for p, o in self.db.execute("SELECT partition, next_offset FROM progress WHERE topic = ?",
                                                 (self.topic,))}

    def apply(self, batch: list[ChangeRecord]) -> None:
        with self.db:  # one transaction: the rows and the position move together
            for change in batch:
                self.db.execute("DELETE FROM docs WHERE key = ?", (change.key,))
                if change.row is None:
                    self.db.execute("DELETE FROM rows WHERE key = ?", (change.key,))
                    continue
                self.db.execute("INSERT OR REPLACE INTO rows VALUES (?, ?)", (change.key, json.dumps(change.row)))
                body = " ".join(str(change.row.get(c) or "") for c in self.text_columns)
                self.db.execute("INSERT INTO docs VALUES (?, ?)", (change.key, body))
            for change in batch:
                self.db.execute("INSERT OR REPLACE INTO progress VALUES (?, ?, ?)",
                                (self.topic, change.partition, change.offset + 1))

    def search(self, query: str, limit: int = 20) -> list[dict]:
        rows = self.db.execute("SELECT r.row FROM docs d JOIN rows r ON r.key = d.key WHERE docs MATCH ? "
                               "ORDER BY rank LIMIT ?", (query, limit)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def table(self) -> dict[str, dict]:
        return {k: json.loads(r) for k, r in self.db.execute("SELECT key, row FROM rows")}


class Cache(DerivedSystem):
    """The latest row per key in Redis (``PREFIX:key`` -> JSON); deletes evict."""

    def __init__(self, redis_url: str, topic: str, prefix: str | None = None) -> None:
        import redis

        self.redis = redis.Redis.from_url(redis_url)
        self.topic = topic
        self.prefix = prefix or topic
        self.progress_key = f"freshet:progress:{topic}"

    def positions(self) -> dict[int, int]:
        return {int(p): int(o) for p, o in self.redis.hgetall(self.progress_key).items()}

    def apply(self, batch: list[ChangeRecord]) -> None:
        pipe = self.redis.pipeline(transaction=True)  # MULTI/EXEC: rows and position together
        for change in batch:
            name = f"{self.prefix}:{change.key}"
            if change.row is None:
                pipe.delete(name)
            else:
                pipe.set(name, json.dumps(change.row))
            pipe.hset(self.progress_key, str(change.partition), change.offset + 1)
        pipe.execute()

    def get(self, key: dict) -> dict | None:
        raw = self.redis.get(f"{self.prefix}:{json.dumps(key, sort_keys=True)}")
        return json.loads(raw) if raw else None

    def table(self) -> dict[str, dict]:
        out = {}
        for name in self.redis.scan_iter(f"{self.prefix}:*"):
            out[name.decode()[len(self.prefix) + 1:]] = json.loads(self.redis.get(name))
        return out

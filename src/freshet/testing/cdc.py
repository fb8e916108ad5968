"""Running the PostgreSQL connector in a test, and the source table as the connector would render it."""

from __future__ import annotations

import json
import threading
import time
import uuid

from freshet.cdc.pgoutput import convert
from freshet.cdc.postgres import CdcConfig, PostgresConnector
from freshet.client.postgres import connection


def source_state(dsn: str, table: str, keys: list[str]) -> dict:
    """The table as the connector would render it: key JSON -> row of converted values."""
    schema, name = table.split(".")
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                    "AND NOT attisdropped ORDER BY attnum", (f'"{schema}"."{name}"',))
        columns = cur.fetchall()
        cur.execute(f'SELECT {", ".join(f"{c}::text" for c, _ in columns)} FROM "{schema}"."{name}"')
        out = {}
        for row in cur.fetchall():
            values = {c: None if v is None else convert(oid, v) for (c, oid), v in zip(columns, row)}
            out[json.dumps({k: values[k] for k in keys}, sort_keys=True)] = values
        return out


def run_connector(config: CdcConfig, action, changes: int = 0) -> PostgresConnector:
    """Run the connector, do ``action`` once it streams, and stop it when ``changes`` more changes
    have been captured and acknowledged (no sleeping on a guess: a loaded machine is slow)."""
    connector = PostgresConnector(config)
    thread = threading.Thread(target=connector.run)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not connector.streaming and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.05)
        action()
        while time.monotonic() < deadline and thread.is_alive() and (
                connector.stats.changes < changes or connector.stats.acknowledged_changes < changes):
            time.sleep(0.05)
    finally:
        connector.stop()
        thread.join(60)
    return connector


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


class ChangeFollower:
    """A CDC topic (one partition) read as it grows: the table its change events describe (key JSON -> row),
    applied in offset order, and every change event read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        from freshet.client import consumer_config

        self.topic = topic
        self.consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
        self.assigned = False  # on the first poll: the topic may not exist yet when this starts
        self.state: dict = {}
        self.events: list[dict] = []
        self.position = 0

    def end(self) -> int:
        """The partition's high watermark; 0 while the topic does not exist yet."""
        from confluent_kafka import KafkaException, TopicPartition

        from freshet.client.offsets import watermark_offsets

        try:
            return watermark_offsets(self.consumer, TopicPartition(self.topic, 0), 10)[1]
        except KafkaException:
            return 0

    def poll(self, timeout_s: float = 0.5) -> int:
        """Apply what has arrived (waiting up to ``timeout_s`` for it); the number of records read."""
        if not self.assigned:
            from confluent_kafka import TopicPartition

            self.consumer.assign([TopicPartition(self.topic, 0, 0)])
            self.assigned = True
        messages = [m for m in self.consumer.consume(5000, timeout_s) if m.error() is None]
        for m in messages:
            self.position = m.offset() + 1
            key = json.dumps(json.loads(m.key()), sort_keys=True)
            if m.value() is None:  # a delete's tombstone
                self.state.pop(key, None)
                continue
            event = json.loads(m.value())
            self.events.append(event)
            if event["op"] == "d":
                self.state.pop(key, None)
            else:
                self.state[key] = event["after"]
        return len(messages)

    def close(self) -> None:
        self.consumer.close()


def rebuild(bootstrap: str, topic: str) -> tuple[dict, list[dict]]:
    """The table a CDC topic describes, read from its start to its end now, and its change events."""
    follower = ChangeFollower(bootstrap, topic)
    try:
        high = follower.end()
        deadline = time.monotonic() + 60
        while follower.position < high and time.monotonic() < deadline:
            follower.poll()
    finally:
        follower.close()
    return follower.state, follower.events

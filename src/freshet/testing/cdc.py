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


def rebuild(bootstrap: str, topic: str) -> tuple[dict, list[dict]]:
    from confluent_kafka import Consumer, TopicPartition

    from freshet.client import consumer_config

    consumer = Consumer(consumer_config(bootstrap))
    high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    state, events, position = {}, [], 0
    deadline = time.monotonic() + 60
    while position < high and time.monotonic() < deadline:
        for m in consumer.consume(5000, 0.5):
            if m.error() is not None:
                continue
            position = m.offset() + 1
            key = json.dumps(json.loads(m.key()), sort_keys=True)
            if m.value() is None:
                state.pop(key, None)
                continue
            event = json.loads(m.value())
            events.append(event)
            if event["op"] == "d":
                state.pop(key, None)
            else:
                state[key] = event["after"]
    consumer.close()
    return state, events

"""Bulk production of (key, value, timestamp) records, idempotent and acks=all; flushing without librdkafka's
500 ms wait for a producer id (``flush_delivered``)."""

from __future__ import annotations

import time
from typing import Iterable

from confluent_kafka import KafkaException, Producer

from .errors import ClientError
from .config import producer_config


def produce_waiting(producer: Producer, topic: str, value: bytes | None, key: bytes | None = None, **kwargs) -> None:
    """``producer.produce``, waiting (and serving delivery reports) while librdkafka's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def flush_delivered(producer: Producer, topic: str, timeout_s: float) -> int:
    """``producer.flush(timeout_s)`` for a short-lived idempotent producer: the number of records not delivered.

    librdkafka 2.16's idempotent producer asks any broker that is up for its producer id. Its first metadata
    answer replaces the bootstrap connection by one to the broker it names; if the producer-id state machine
    runs in that gap it finds no broker up and, for a non-transactional producer, retries only on a fixed
    500 ms timer (the same against Kafka). Every Metadata answer also runs that state machine, so while records
    wait, one metadata request at growing intervals (20, 40, ... 640 ms) gets the id as soon as a broker is up:
    a one-record ``freshet produce`` took ~0.5 s more without it. Idempotence, acks=all and librdkafka's own
    retries are unchanged.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.02
    while True:
        left = producer.flush(max(0.0, min(pause, deadline - time.monotonic())))
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return left
        if pause < 1.0:  # past the first second the producer id has long been there (or no broker answers)
            try:
                producer.list_topics(topic, timeout=min(remaining, 5.0))
            except KafkaException:
                pass  # no broker answered yet: the flush goes on and tells what was not delivered
            pause *= 2
        else:
            pause = remaining


def produce_records(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int | None]],
                    partition: int | None = None, overrides: dict | None = None) -> int:
    """Produce every record as fast as the client goes; raise ClientError if any is not delivered."""
    producer = Producer(producer_config(bootstrap, {"log_level": 0, "queue.buffering.max.messages": 1_000_000,
                                                    **(overrides or {})}))
    failures: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    extra = {} if partition is None else {"partition": partition}
    sent = 0
    for key, value, ts in records:
        kwargs = dict(extra)
        if ts is not None:
            kwargs["timestamp"] = ts
        produce_waiting(producer, topic, value, key, on_delivery=on_delivery, **kwargs)
        sent += 1
        if sent % 10000 == 0:
            producer.poll(0)
    left = flush_delivered(producer, topic, 120)
    if failures or left:
        raise ClientError(f"{len(failures) + left} of {sent} records were not delivered"
                          + (f": {failures[0].str()}" if failures else ""))
    return sent

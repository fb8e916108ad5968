"""Bulk production of (key, value, timestamp) records, idempotent and acks=all."""

from __future__ import annotations

from typing import Iterable

from confluent_kafka import Producer

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
    left = producer.flush(120)
    if failures or left:
        raise ClientError(f"{len(failures) + left} of {sent} records were not delivered"
                          + (f": {failures[0].str()}" if failures else ""))
    return sent

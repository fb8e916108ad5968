"""Checks for crash tests and the crash loop: every acknowledged record stored exactly once, in order."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from freshet.client import consumer_config


def read_everything(bootstrap: str, topic: str, partitions: int, timeout_s: float = 120) -> dict[int, list[bytes]]:
    """Every record of every partition, in offset order."""
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    position = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any(position[p] < ends[p] for p in got) and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            if m.error() is None:
                got[m.partition()].append(m.value())
                position[m.partition()] = m.offset() + 1
    consumer.close()
    return got


def verify_exactly_once_in_order(stored: dict[int, list[bytes]], acked: list[bytes]) -> dict:
    """Records are numbered; within a partition numbers must rise. Counts what went wrong."""
    all_values = [v for values in stored.values() for v in values]
    seen: set[bytes] = set()
    duplicates = 0
    for v in all_values:
        if v in seen:
            duplicates += 1
        seen.add(v)
    acked_set = set(acked)
    out_of_order = 0
    for values in stored.values():
        numbers = [int(v) for v in values if v.isdigit()]
        out_of_order += sum(1 for a, b in zip(numbers, numbers[1:]) if b <= a)
    return {
        "stored": len(all_values),
        "acknowledged": len(acked_set),
        "lost": len(acked_set - seen),
        "duplicates": duplicates,
        "out_of_order": out_of_order,
        "unexpected": len([v for v in seen if not v.isdigit()]),
        "unacknowledged_but_stored": len(seen - acked_set),
    }

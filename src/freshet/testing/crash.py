"""Crash tests: kill -9 a Spark driver mid-stream again and again; check that every acknowledged record is
stored exactly once, in order."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from freshet.client import consumer_config
from freshet.client.offsets import watermark_offsets


def read_everything(bootstrap: str, topic: str, partitions: int, timeout_s: float = 120) -> dict[int, list[bytes]]:
    """Every record of every partition up to its end when asked, in offset order. The consumer's position (not
    the last record's offset) says when a partition is read: a transactional topic ends with a commit marker,
    which no record is delivered for (with the last record's offset, each read waited out ``timeout_s``)."""
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
    ends = {p: watermark_offsets(consumer, TopicPartition(topic, p), 10)[1] for p in range(partitions)}
    assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
    consumer.assign(assigned)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    position = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any(position[p] < ends[p] for p in got) and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            if m.error() is None:
                got[m.partition()].append(m.value())
        position = {tp.partition: max(tp.offset, 0) for tp in consumer.position(assigned)}
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


def committed_batches(checkpoint: str) -> int:
    return len([f for f in glob.glob(os.path.join(checkpoint, "commits", "*")) if os.path.basename(f).isdigit()])


def kill_mid_stream(cmd: list[str], checkpoint: str | Sequence[str], targets=(2,), env=None) -> int:
    """Start ``cmd`` and SIGKILL it once ``target`` batches are committed (in each of the checkpoints, when
    ``cmd`` runs several queries), for each target; returns the number of kills. A batch is usually in flight
    when the signal lands. One new commit per restart is enough: the first batch after a restart replays the
    one the kill interrupted (its offsets are in the checkpoint's offset log, its commit is not), so each kill
    exercises recovery; more batches per restart only cost time. One kill by default, after two committed
    batches (state and output already hold something): each kill costs a driver start (20-60 s on 2 cores),
    and a second exercises the same recovery again."""
    checkpoints = [checkpoint] if isinstance(checkpoint, str) else list(checkpoint)

    def committed() -> int:
        return min(committed_batches(c) for c in checkpoints)

    kills = 0
    for target in targets:
        driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        # a driver's start (a JVM, Python workers) and first microbatches take 20-60 s on 2 quiet cores and
        # several minutes on a busy machine: the deadline is for the latter
        deadline = time.monotonic() + 480
        while committed() < target and time.monotonic() < deadline:
            assert driver.poll() is None, "the driver died on its own"
            time.sleep(0.2)
        if committed() < target:
            driver.kill()
            driver.wait()
        assert committed() >= target, "the driver made no progress in 480 s"
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        kills += 1
    return kills

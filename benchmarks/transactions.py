"""Transactions: what they cost a producer and a read_committed consumer, side by side in one run.

Starts a Freshet broker on 127.0.0.1 (fsync'd group commit on). For ``--rounds`` rounds, alternating:
1,000,000 x 100 B into 6 partitions through (a) an idempotent producer without transactions and (b) a
transactional producer committing every ``--commit-ms`` (100 ms), both acks=all, linger.ms=5, records
handed over with ``produce_batch``; then the transactional topic read back by a read_uncommitted and a
read_committed consumer (assign, no group). Prints one JSON object per measurement and a summary with the
medians and the ratios (targets: transactional produce >= 0.8x, read_committed consume >= 0.9x).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.local import BrokerProcess
from freshet.testing.topics import create_topic

CHUNK = 10_000


def produce(bootstrap: str, topic: str, records: int, partitions: int, value: bytes,
            commit_ms: float | None) -> dict:
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True,
              "queue.buffering.max.messages": 2_000_000}
    if commit_ms is not None:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    messages = [{"value": value} for _ in range(CHUNK)]
    transactions = 0
    start = time.perf_counter()
    if commit_ms is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    opened = time.perf_counter()
    sent = 0
    while sent < records:
        n = min(CHUNK, records - sent)
        while True:
            try:
                producer.produce_batch(topic, messages[:n], partition=(sent // CHUNK) % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        sent += n
        producer.poll(0)
        if commit_ms is not None and (time.perf_counter() - opened) * 1000 >= commit_ms:
            producer.commit_transaction(60)
            transactions += 1
            producer.begin_transaction()
            opened = time.perf_counter()
    if commit_ms is not None:
        producer.commit_transaction(60)
        transactions += 1
    producer.flush(120)
    elapsed = time.perf_counter() - start
    return {"msgs_per_s": round(records / elapsed), "seconds": round(elapsed, 2), "transactions": transactions}


def consume(bootstrap: str, topic: str, records: int, partitions: int, isolation: str) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800, "fetch.queue.backoff.ms": 10, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    while seen < records and time.perf_counter() - start < 120:
        for msg in consumer.consume(100_000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return {"msgs_per_s": round(seen / elapsed), "seconds": round(elapsed, 2), "records_read": seen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--commit-ms", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    value = os.urandom(args.size // 2).hex().encode()[: args.size]
    common = {"records": args.records, "record_bytes": args.size, "partitions": args.partitions,
              "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
    results: dict[str, list[int]] = {"plain": [], "transactional": [], "read_uncommitted": [], "read_committed": []}
    with BrokerProcess(extra_args=["--cleaner-interval-ms", "3600000"]) as broker:
        for round_ in range(args.rounds):
            topics = {}
            order = ("plain", "transactional") if round_ % 2 == 0 else ("transactional", "plain")
            for kind in order:
                topic = topics[kind] = f"bench-{kind}-{round_}"
                create_topic(broker.bootstrap, topic, args.partitions)
                r = produce(broker.bootstrap, topic, args.records, args.partitions, value,
                            args.commit_ms if kind == "transactional" else None)
                results[kind].append(r["msgs_per_s"])
                print(json.dumps({"phase": "produce", "producer": kind, "round": round_, **r, **common}), flush=True)
            isolations = ("read_uncommitted", "read_committed")
            for isolation in isolations if round_ % 2 == 0 else reversed(isolations):
                r = consume(broker.bootstrap, topics["transactional"], args.records, args.partitions, isolation)
                results[isolation].append(r["msgs_per_s"])
                print(json.dumps({"phase": "consume", "isolation": isolation, "round": round_, **r, **common}),
                      flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(json.dumps({"summary": True, "medians_msgs_per_s": med, "spread": {k: [min(v), max(v)]
                                                                             for k, v in results.items()},
                      "transactional_vs_plain": round(med["transactional"] / med["plain"], 2),
                      "read_committed_vs_uncommitted": round(med["read_committed"] / med["read_uncommitted"], 2),
                      "targets": {"transactional_vs_plain": 0.8, "read_committed_vs_uncommitted": 0.9},
                      **common}), flush=True)


if __name__ == "__main__":
    main()

"""Broker throughput: 1,000,000 x 100 B records, 6 partitions, confluent-kafka, acks=all, linger.ms=5.

Starts a Freshet broker process on 127.0.0.1 (fsync'd group commit on), produces, then reads
everything back with one consumer (assign, no group). Prints one JSON object per phase.
Client and broker share this machine's 2 cores.

Client settings that matter, both measured here:
- the producer hands records over with ``produce_batch`` (10,000 per call): per-record
  ``produce()`` calls alone cost 1.76 s per million on this machine, before any broker work;
- the consumer sets ``fetch.queue.backoff.ms=10``: librdkafka's default (1000 ms) pauses
  fetching for a whole second whenever its local queue is briefly full, which caps a Python
  consumer near 200k msgs/s against any broker.
Delivery is verified afterwards: the partitions' end offsets must add up to the records sent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--bootstrap", help="use a running cluster instead of starting a broker")
    args = ap.parse_args()

    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = BrokerProcess().start()
        bootstrap = broker.bootstrap
    try:
        topic = f"bench-{int(time.time())}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        value = os.urandom(args.size // 2).hex().encode()[: args.size]
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                             "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False})
        chunk = 10_000
        messages = [{"value": value} for _ in range(chunk)]
        start = time.perf_counter()
        sent = 0
        while sent < args.records:
            n = min(chunk, args.records - sent)
            batch = messages if n == chunk else messages[:n]
            while True:
                try:
                    producer.produce_batch(topic, batch, partition=(sent // chunk) % args.partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += n
            producer.poll(0)
        producer.flush(120)
        elapsed = time.perf_counter() - start
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
        stored = sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                     for p in range(args.partitions))
        probe.close()
        errors = [None] * (args.records - stored)
        mb = args.records * args.size / 1e6
        common = {"records": args.records, "record_bytes": args.size, "partitions": args.partitions,
                  "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
        print(json.dumps({"phase": "produce", "acks": "all", "linger_ms": 5, "msgs_per_s": round(args.records / elapsed),
                          "mb_per_s": round(mb / elapsed, 1), "seconds": round(elapsed, 2),
                          "records_stored": stored, "missing": len(errors), **common}), flush=True)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                             "fetch.max.bytes": 52428800, "fetch.queue.backoff.ms": 10})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
        seen = 0
        start = time.perf_counter()
        while seen < args.records and time.perf_counter() - start < 120:
            for msg in consumer.consume(100_000, 1.0):
                if msg.error() is None:
                    seen += 1
        elapsed = time.perf_counter() - start
        consumer.close()
        print(json.dumps({"phase": "consume", "msgs_per_s": round(seen / elapsed), "mb_per_s": round(mb / elapsed, 1),
                          "seconds": round(elapsed, 2), "records_read": seen, **common}), flush=True)
        del producer, admin  # close client connections before the broker goes away
    finally:
        if broker:
            broker.close()


if __name__ == "__main__":
    main()

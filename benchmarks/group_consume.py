"""Consumer groups: time from subscribe to first record for a new group, and group throughput.

(a) A topic with records; a new group's first member subscribes with default client settings;
    we time subscribe() -> first record returned by poll(). Repeated --trials times.
(b) 1,000,000 x 100 B records in 6 partitions consumed by 3 members of one group (threads,
    each its own librdkafka consumer); msgs/s from the first subscribe to the last record.
Prints one JSON object per result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    broker = None if args.bootstrap else BrokerProcess().start()
    bootstrap = args.bootstrap or broker.bootstrap
    common = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"groups-bench-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 6)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "queue.buffering.max.messages": 2_000_000})
        value = b"x" * 100
        messages = [{"value": value} for _ in range(10_000)]
        for i in range(args.records // 10_000):
            while True:
                try:
                    producer.produce_batch(topic, messages, partition=i % 6)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)

        firsts = []
        for _ in range(args.trials):
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"first-{uuid.uuid4().hex[:8]}",
                                 "auto.offset.reset": "earliest"})
            start = time.perf_counter()
            consumer.subscribe([topic])
            msg = None
            while msg is None or msg.error() is not None:
                msg = consumer.poll(0.05)
            firsts.append(time.perf_counter() - start)
            consumer.close()
        print(json.dumps({"result": "subscribe_to_first_record_s", "median": round(statistics.median(firsts), 3),
                          "max": round(max(firsts), 3), "trials": args.trials, "client_settings": "defaults",
                          "target_s": 1.0, **common}), flush=True)

        group = f"throughput-{uuid.uuid4().hex[:8]}"
        counts = [0, 0, 0]
        done = threading.Event()

        def member(i: int) -> None:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                          "fetch.queue.backoff.ms": 10})
            c.subscribe([topic])
            while not done.is_set():
                counts[i] += sum(1 for m in c.consume(10_000, 0.2) if m.error() is None)
                if sum(counts) >= args.records:
                    done.set()
            c.close()

        start = time.perf_counter()
        threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        done.wait(300)
        elapsed = time.perf_counter() - start
        for t in threads:
            t.join()
        print(json.dumps({"result": "group_consume", "members": 3, "records": sum(counts),
                          "per_member": counts, "msgs_per_s": round(sum(counts) / elapsed),
                          "seconds": round(elapsed, 2), **common}), flush=True)
        del producer, admin
    finally:
        if broker:
            broker.close()


if __name__ == "__main__":
    main()

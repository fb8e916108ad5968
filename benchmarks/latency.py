"""End-to-end latency, produce -> consume, through a Freshet broker with fsync'd acks=all.

A producer (linger.ms=0, acks=all, idempotent) sends records carrying their send time at
--rates msgs/s for --seconds each; a consumer (assign, no group) on the same machine receives
them; latency = receive time - send time. The broker only exposes a record once it is fsync'd
(group commit), so this includes the fsync. Prints p50/p99/p99.9 per rate as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local import BrokerProcess


def percentile(values: list[float], q: float) -> float:
    return values[min(int(len(values) * q), len(values) - 1)]


def run(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency", "fetch.wait.max.ms": 100,
                         "fetch.queue.backoff.ms": 1, "log_level": 0})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    latencies: list[float] = []
    expected = int(rate * seconds)
    stop = threading.Event()

    def consume():
        # poll(), not consume(n, timeout): consume waits for n records or the whole timeout
        while not stop.is_set() and len(latencies) < expected:
            m = consumer.poll(0.1)
            if m is not None and m.error() is None:
                latencies.append((time.time_ns() - struct.unpack(">q", m.value()[:8])[0]) / 1e6)

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(1.0)  # the consumer is assigned and fetching before the first record goes out
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "enable.idempotence": True,
                         "socket.nagle.disable": True, "log_level": 0})
    producer.produce(topic, struct.pack(">q", time.time_ns()) + b"warm-up", partition=0)
    producer.flush(10)  # connection, metadata and producer id before the clock starts
    expected += 1
    start = time.perf_counter()
    sent = 0
    pad = b"x" * 92
    while sent < expected:
        due = int((time.perf_counter() - start) * rate)
        while sent < min(due, expected):
            producer.produce(topic, struct.pack(">q", time.time_ns()) + pad, partition=sent % 3)
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(30)
    reader.join(30)
    stop.set()
    consumer.close()
    latencies.sort()
    return {"rate": rate, "records": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2), "p999_ms": round(percentile(latencies, 0.999), 2),
            "max_ms": round(latencies[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    common = {"acks": "all", "fsync": True, "machine": f"{platform.machine()} {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d")}
    with BrokerProcess() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for rate in (int(r) for r in args.rates.split(",")):
            topic = f"latency-{rate}"
            admin.create_topics([NewTopic(topic, 3)])[topic].result(10)
            print(json.dumps({"result": "end_to_end_latency", **run(broker.bootstrap, topic, rate, args.seconds),
                              "target_p99_ms": 10, **common}), flush=True)
        del admin


if __name__ == "__main__":
    main()

"""Partition reassignment, measured on a three-broker cluster on this machine (``LocalCluster``: three controllers
and three brokers, processes on 127.0.0.1, sharing this machine's cores).

One partition (replication factor 1) is filled with ``--size`` MB, then moved to another broker twice: without a
throttle, then with ``--throttle`` bytes/s (leader and follower side, as ``freshet topic reassign --throttle`` sets
it), back to its first broker. Each move is timed from the AlterPartitionReassignments request to the metadata
showing the target as the only replica (the new copy caught up, joined the ISR and took over). Meanwhile a client
produces one record every 5 ms (acks=all, idempotent) to the moving partition itself and another to a second topic
led by the third broker, and the produce latency (send to acknowledgement) is reported as p50 / p99 / max, with the
same measured before any move as the baseline. Prints JSON.

    python benchmarks/reassignment.py [--size 1024] [--throttle 20971520]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.reassignment import ReassignmentAdmin
from freshet.local.cluster import LocalCluster


class LatencyProbe(threading.Thread):
    """One record every ``period_s`` to each topic; the latency of every acknowledged one, by topic."""

    def __init__(self, bootstrap: str, topics: list[str], period_s: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.topics = topics
        self.period_s = period_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0, "message.timeout.ms": 300_000})
        self.latencies: dict[str, list[float]] = {t: [] for t in topics}
        self.failed = 0
        self.errors: dict[str, int] = {}
        self._stopping = threading.Event()

    def _delivered(self, sent: float, topic: str):
        def callback(err, _msg):
            if err is not None:
                self.failed += 1
                self.errors[err.name()] = self.errors.get(err.name(), 0) + 1
            else:
                self.latencies[topic].append((time.monotonic() - sent) * 1000)
        return callback

    def run(self) -> None:
        while not self._stopping.is_set():
            for topic in self.topics:
                self.producer.produce(topic, b"probe", on_delivery=self._delivered(time.monotonic(), topic))
            self.producer.poll(self.period_s)
        self.producer.flush(300)

    def take(self) -> dict[str, list[float]]:
        taken = {t: list(v) for t, v in self.latencies.items()}
        for v in self.latencies.values():
            v.clear()
        return taken

    def stop(self) -> None:
        self._stopping.set()
        self.join(600)


def summary(latencies: list[float]) -> dict:
    if not latencies:
        return {"records": 0}
    ordered = sorted(latencies)
    return {"records": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
            "max_ms": round(ordered[-1], 1)}


def fill(cluster: LocalCluster, topic: str, megabytes: int) -> float:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(100_000)  # incompressible, ~10 records a MB
    start = time.monotonic()
    for _ in range(megabytes * 10):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(600) == 0, "not every record of the fill was acknowledged"
    return time.monotonic() - start


def move(cluster: LocalCluster, admin: ReassignmentAdmin, topic: str, target: int) -> float:
    start = time.monotonic()
    admin.alter({(topic, 0): [target]})
    cluster.wait_until(lambda m: (p := cluster.partition(topic, 0, m)) and p["replicas"] == [target]
                       and not p["removing_replicas"], 3600, f"{topic}-0 on broker {target}")
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="MB in the partition moved (default 1024)")
    parser.add_argument("--throttle", type=int, default=20 << 20, help="bytes/s of the throttled move")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="freshet-reassign-bench-") as directory, \
            LocalCluster(3, directory=directory) as cluster:
        client = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for name in ("moving", "bystander"):
            client.create_topics([NewTopic(name, 1, 1)])[name].result(60)
        first = cluster.wait_until(lambda m: (p := cluster.partition("moving", 0, m)) and p["leader"], 60)
        cluster.wait_until(lambda m: (p := cluster.partition("bystander", 0, m)) and p["leader"] > 0, 60)
        other = next(b for b in (1, 2, 3) if b != first)
        fill_s = fill(cluster, "moving", args.size)
        time.sleep(10)  # the fill's writes reach the disk
        probe = LatencyProbe(cluster.bootstrap, ["moving", "bystander"])
        probe.start()
        admin = ReassignmentAdmin(cluster.bootstrap)
        time.sleep(15)  # the baseline: fifteen seconds of probes before any move
        results = {"size_mb": args.size, "fill_s": round(fill_s, 1), "baseline": {
            t: summary(v) for t, v in probe.take().items()}}
        seconds = move(cluster, admin, "moving", other)
        results["unthrottled"] = {"seconds": round(seconds, 1), "mb_per_s": round(args.size / seconds, 1),
                                  **{f"produce_{t}": summary(v) for t, v in probe.take().items()}}
        admin.set_throttle({("moving", 0): [first]}, args.throttle)
        seconds = move(cluster, admin, "moving", first)
        results["throttled"] = {"throttle_mb_per_s": round(args.throttle / (1 << 20), 1),
                                "seconds": round(seconds, 1), "mb_per_s": round(args.size / seconds, 1),
                                **{f"produce_{t}": summary(v) for t, v in probe.take().items()}}
        admin.clear_throttle(["moving"], [1, 2, 3])
        probe.stop()
        admin.close()
        results["failed_produces"] = probe.failed
        results["failed_produce_errors"] = probe.errors
        results["load_average"] = os.getloadavg()[0]
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

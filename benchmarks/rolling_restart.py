"""Produce latency during a rolling restart, measured on a three-broker cluster on this machine
(``freshet.local.cluster.LocalCluster``: three controllers and three brokers sharing this machine's cores).

One idempotent ``acks=all`` confluent-kafka producer (linger 5 ms) sends a record every ``--interval-ms`` to a topic
of ``--partitions`` partitions, replication factor 3, ``min.insync.replicas=2``, all along the run; each record's
latency is the time from ``produce()`` to its delivery report. Phases, in one run:

- **steady**: ``--steady-s`` seconds with every broker up;
- **rolling restart**: every broker in turn stopped with SIGTERM (controlled shutdown: its leaderships move to
  other ISR members first), started again, and the next one only once every partition has its whole ISR
  (``LocalCluster.rolling_restart``);
- **rolling kill -9** (``--kill``, for contrast): the same with SIGKILL instead of SIGTERM.

Per phase: records acknowledged, failed produces (delivery errors; must be 0), latency p50 / p99 / max, and the
phase's duration. JSON on stdout.

    python benchmarks/rolling_restart.py [--steady-s 20] [--interval-ms 5] [--partitions 3] [--kill]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local.cluster import LocalCluster

TOPIC = "rolling"


class Load(threading.Thread):
    """Records at a steady pace, each one's latency filed under the phase it was sent in."""

    def __init__(self, bootstrap: str, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "log_level": 3})
        self.interval_s = interval_s
        self.phase = "warm-up"
        self.latencies: dict[str, list[float]] = {}
        self.failed: dict[str, list[str]] = {}
        self.stopping = threading.Event()

    def _report(self, phase: str, sent: float):
        def delivered(err, msg) -> None:
            if err is None:
                self.latencies.setdefault(phase, []).append(time.monotonic() - sent)
            else:
                self.failed.setdefault(phase, []).append(str(err))
        return delivered

    def run(self) -> None:
        next_at = time.monotonic()
        n = 0
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_at:
                self.producer.produce(TOPIC, str(n).encode(), on_delivery=self._report(self.phase, now))
                n += 1
                next_at += self.interval_s
            self.producer.poll(max(0.0, min(next_at - time.monotonic(), 0.01)))
        self.producer.flush(120)


def summary(latencies: list[float], failed: list[str], seconds: float) -> dict:
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else None

    return {"acknowledged": len(ordered), "failed": len(failed), "failures": sorted(set(failed))[:5],
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": round(ordered[-1] * 1000, 2) if ordered else None,
            "mean_ms": round(statistics.fmean(ordered) * 1000, 2) if ordered else None, "seconds": round(seconds, 1)}


def rolling_kill(cluster: LocalCluster, timeout: float) -> None:
    for node_id in sorted(cluster.nodes):
        cluster.wait_until(cluster.fully_replicated, timeout, "every partition's whole ISR")
        cluster.kill(node_id)
        cluster.restart(node_id, timeout)
    cluster.wait_until(cluster.fully_replicated, timeout, "every partition's whole ISR")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steady-s", type=float, default=20.0)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--kill", action="store_true", help="also a rolling restart by kill -9, for contrast")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="freshet-rolling-") as directory, \
            LocalCluster(3, directory=directory) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 3, config={"min.insync.replicas": "2"})])[
            TOPIC].result(60)
        cluster.wait_until(cluster.fully_replicated, 120, "the topic's whole ISR")
        load = Load(cluster.bootstrap, args.interval_ms / 1000)
        load.start()
        time.sleep(2.0)  # connections made, metadata known
        phases = [("steady", lambda: time.sleep(args.steady_s)), ("rolling restart", lambda: cluster.rolling_restart())]
        if args.kill:
            phases.append(("rolling kill -9", lambda: rolling_kill(cluster, 120)))
        timings = {}
        for name, run in phases:
            load.phase = name
            started = time.monotonic()
            run()
            timings[name] = time.monotonic() - started
        load.phase = "after"
        time.sleep(2.0)
        load.stopping.set()
        load.join(180)
        result = {
            "machine": {"cpus": __import__("os").cpu_count(), "load_average": __import__("os").getloadavg()[0]},
            "settings": {"brokers": 3, "replication_factor": 3, "min_insync_replicas": 2,
                         "partitions": args.partitions, "interval_ms": args.interval_ms, "linger_ms": 5},
            "phases": {name: summary(load.latencies.get(name, []), load.failed.get(name, []), timings[name])
                       for name, _ in phases},
        }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

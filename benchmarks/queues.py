"""Queues: competing consumers acknowledging every record, Freshet share groups against Redis Streams, in one run.

Freshet: a broker on 127.0.0.1 (fsync'd group commit on: an acknowledgement is answered once it is on disk), a
topic of ``--partitions`` partitions holding ``--records`` x 100 B; ``--consumers`` processes, each a
confluent-kafka ShareConsumer in one share group (explicit acknowledgement: ``acknowledge(m, ACCEPT)`` for every
record, sent with the next poll; ``max.poll.records`` ``--batch``).

Redis Streams, the queue most Python users reach for: Debian's redis-server on 127.0.0.1 (no persistence), one
stream holding the same records (XADD, pipelined), one consumer group; the same number of processes, each
looping ``XREADGROUP COUNT --batch`` and ``XACK`` of every id it read, with redis-py.

The records are loaded before the clock starts; the clock runs from the consumers' start until every record
is acknowledged. Rounds alternate Freshet / Redis; prints one JSON object per run and a summary with the medians,
their spread and the ratio (target: Freshet >= 1.0x Redis Streams).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import uuid

VALUE = b"x" * 100


def _freshet_worker(bootstrap: str, group: str, topic: str, batch: int, done, stop, ready) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       "max.poll.records": batch, "log_level": 3})
    c.subscribe([topic])
    ready.wait()
    accept = AcknowledgeType.ACCEPT
    n = 0
    while not stop.is_set():
        msgs = c.poll(0.2)
        for m in msgs:
            if m.error() is None:
                c.acknowledge(m, accept)
                n += 1
        if msgs:
            with done.get_lock():
                done.value += len(msgs)
    c.commit_sync(30)
    c.close()


def _redis_worker(url: str, stream: str, group: str, name: str, batch: int, done, stop, ready) -> None:
    import redis

    r = redis.Redis.from_url(url)
    ready.wait()
    while not stop.is_set():
        answer = r.xreadgroup(group, name, {stream: ">"}, count=batch, block=200)
        if not answer:
            continue
        ids = [entry_id for entry_id, _fields in answer[0][1]]
        r.xack(stream, group, *ids)
        with done.get_lock():
            done.value += len(ids)


def _run(target, args_for, consumers: int, records: int) -> dict:
    done, stop, ready = mp.Value("q", 0), mp.Event(), mp.Event()
    before = os.times()
    procs = [mp.Process(target=target, args=(*args_for(i), done, stop, ready)) for i in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # connected and subscribed before the clock starts
    start = time.perf_counter()
    ready.set()
    while done.value < records:
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    stop.set()
    for p in procs:
        p.join(60)
    after = os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return {"records": records, "seconds": round(seconds, 3), "records_per_s": round(records / seconds),
            "consumers_cpu_s": round(cpu, 2)}


def freshet_round(records: int, partitions: int, consumers: int, batch: int) -> dict:
    from confluent_kafka import Producer

    from freshet.client.queue import set_group_configs
    from freshet.local import BrokerProcess
    from freshet.testing.topics import create_topic

    with BrokerProcess() as broker:
        topic, group = "jobs", f"workers-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, partitions)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "queue.buffering.max.messages": 2_000_000})
        chunk = [{"value": VALUE}] * 10_000
        for i in range(0, records, 10_000):
            producer.produce_batch(topic, chunk[:min(10_000, records - i)], partition=(i // 10_000) % partitions)
            producer.poll(0)
        producer.flush(120)
        set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        cpu_before = _cpu_seconds(broker.pid)
        result = _run(_freshet_worker, lambda i: (broker.bootstrap, group, topic, batch), consumers, records)
        result["broker_cpu_s"] = round(_cpu_seconds(broker.pid) - cpu_before, 2)
        return result


def redis_round(records: int, consumers: int, batch: int) -> dict:
    import redis

    from freshet.testing.redis_server import RedisServer

    with RedisServer() as server:
        r = redis.Redis.from_url(server.url)
        stream, group = "jobs", "workers"
        pipe = r.pipeline(transaction=False)
        for i in range(records):
            pipe.xadd(stream, {"v": VALUE})
            if i % 10_000 == 9_999:
                pipe.execute()
        pipe.execute()
        r.xgroup_create(stream, group, id="0")
        cpu_before = _cpu_seconds(server.proc.pid)
        result = _run(_redis_worker, lambda i: (server.url, stream, group, f"c{i}", batch), consumers, records)
        result["server_cpu_s"] = round(_cpu_seconds(server.proc.pid) - cpu_before, 2)
        pending = r.xpending(stream, group)["pending"]
        assert pending == 0, f"{pending} entries left unacknowledged"
        return result


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=500, help="records per poll / XREADGROUP COUNT")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    common = {"records": args.records, "partitions": args.partitions, "consumers": args.consumers,
              "batch": args.batch, "machine": f"{platform.machine()} {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d")}
    rates: dict[str, list[float]] = {"freshet": [], "redis": []}
    for round_ in range(1, args.rounds + 1):
        r = freshet_round(args.records, args.partitions, args.consumers, args.batch)
        rates["freshet"].append(r["records_per_s"])
        print(json.dumps({"system": "freshet share group", "round": round_, **common, **r}), flush=True)
        r = redis_round(args.records, args.consumers, args.batch)
        rates["redis"].append(r["records_per_s"])
        print(json.dumps({"system": "redis streams", "round": round_, **common, **r}), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(json.dumps({"summary": True, "medians_records_per_s": med,
                      "spread": {k: [min(v), max(v)] for k, v in rates.items()},
                      "ratio_freshet_to_redis": round(med["freshet"] / med["redis"], 2), "target": 1.0, **common}),
          flush=True)


if __name__ == "__main__":
    main()

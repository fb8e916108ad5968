"""Many connections at once: --connections raw Kafka-protocol clients (half producers sending acks=all
Produce requests, half consumers long-polling Fetch requests) held open for --seconds on loopback.
Reports errors, broker RSS (max), and per-request latency p50/p99 by request type. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import struct
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.serial import entity_reader

from freshet.broker.wire.protocol import response_schema
from freshet.local import BrokerProcess
from freshet.log import encode_batch
from freshet.testing.fuzz import encode_request

PRODUCE_V, FETCH_V = 9, 11


class Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer, self.correlation = reader, writer, 0

    async def call(self, api_key: int, version: int, body: dict):
        self.correlation += 1
        frame = encode_request(api_key, version, body, self.correlation)
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        data = await self.reader.readexactly(size)
        schema = response_schema(api_key, version)
        result = entity_reader(schema)(data, 4 + (1 if schema.__flexible__ else 0))
        return result[0] if isinstance(result, tuple) else result.value


async def producer(port, topic, partitions, i, deadline, stats, interval):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = Conn(reader, writer)
    batch = encode_batch([(b"k%d" % i, b"v" * 100, int(time.time() * 1000))] * 10)
    try:
        while time.monotonic() < deadline:
            t = time.perf_counter()
            r = await conn.call(0, PRODUCE_V, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": i % partitions, "records": batch}]}]})
            stats["produce"].append(time.perf_counter() - t)
            if r.responses[0].partition_responses[0].error_code:
                stats["errors"] += 1
            await asyncio.sleep(interval)
    except (ConnectionError, asyncio.IncompleteReadError):
        stats["disconnects"] += 1
    finally:
        writer.close()


async def consumer(port, topic, partitions, i, deadline, stats):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = Conn(reader, writer)
    offset = 0
    try:
        while time.monotonic() < deadline:
            t = time.perf_counter()
            r = await conn.call(1, FETCH_V, {
                "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": topic, "partitions": [{"partition": i % partitions, "current_leader_epoch": -1,
                                                            "fetch_offset": offset, "log_start_offset": -1,
                                                            "partition_max_bytes": 1 << 16}]}]})
            stats["fetch"].append(time.perf_counter() - t)
            part = r.responses[0].partitions[0]
            if part.error_code:
                stats["errors"] += 1
            records = bytes(part.records or b"")
            pos = 0
            while len(records) - pos >= 61:  # walk batch headers to the next offset
                base, length = struct.unpack_from(">qi", records, pos)
                last_delta = struct.unpack_from(">i", records, pos + 23)[0]
                offset = base + last_delta + 1
                pos += 12 + length
    except (ConnectionError, asyncio.IncompleteReadError):
        stats["disconnects"] += 1
    finally:
        writer.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


async def main_async(args, broker) -> dict:
    stats = {"produce": [], "fetch": [], "errors": 0, "disconnects": 0}
    deadline = time.monotonic() + args.seconds
    half = args.connections // 2
    tasks = [asyncio.create_task(producer(broker.port, "load", 12, i, deadline, stats, args.produce_interval))
             for i in range(half)]
    tasks += [asyncio.create_task(consumer(broker.port, "load", 12, i, deadline, stats))
              for i in range(args.connections - half)]
    rss = []
    while time.monotonic() < deadline:
        rss.append(rss_mb(broker.proc.pid))
        await asyncio.sleep(1)
    await asyncio.gather(*tasks)
    out = {"connections": args.connections, "seconds": args.seconds, "errors": stats["errors"],
           "disconnects": stats["disconnects"], "broker_rss_mb_start": round(rss[0]),
           "broker_rss_mb_max": round(max(rss))}
    for kind in ("produce", "fetch"):
        values = sorted(stats[kind])
        out[f"{kind}_requests"] = len(values)
        out[f"{kind}_p50_ms"] = round(values[len(values) // 2] * 1000, 1)
        out[f"{kind}_p99_ms"] = round(values[int(len(values) * 0.99)] * 1000, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--produce-interval", type=float, default=0.2, help="seconds between one producer's requests")
    args = ap.parse_args()
    with BrokerProcess() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("load", 12)])["load"].result(10)
        result = asyncio.run(main_async(args, broker))
        result.update({"result": "connections_held", "alive": broker.proc.poll() is None,
                       "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")})
        print(json.dumps(result), flush=True)
        del admin


if __name__ == "__main__":
    main()

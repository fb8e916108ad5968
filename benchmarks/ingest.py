"""Ingest throughput: HTTP produce (REST Proxy v2 and v3) and syslog over UDP, into a Freshet broker.

Starts a broker and ``freshet ingest serve`` on 127.0.0.1 (each its own process). Then, for ``--rounds``
rounds, alternating:

- HTTP: ``--clients`` (8) keep-alive connections, each sending requests of ``--batch`` (100) records of about
  100 B one after another (the next once the last is answered, i.e. acknowledged by the log), for
  ``--seconds``; records/s = records answered 200 / elapsed. Once with v2 bodies ({"records": [...]}), once
  with v3 (100 concatenated record objects). The load generator writes prebuilt requests on raw sockets
  (like wrk) so it costs the shared 2 cores little.
- syslog UDP: ``--lines`` RFC 5424 lines sent at each ``--udp-rate`` lines/s (paced per millisecond; a rate
  above the target shows the listener's capacity); lost =
  sent - records in the topic (the server's own counters tell where: dropped at the bound, or dropped by the
  kernel's socket buffer); lines/s = lines written / time until the last was in the log.

Prints one JSON object per measurement, then a summary with medians and spreads. Targets (issue 29):
>= 100,000 records/s over HTTP, >= 100,000 syslog lines/s with 0 lost below that rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import tempfile
import time
import uuid

import httpx

from freshet.local import BrokerProcess
from freshet.testing.ingest import IngestProcess
from freshet.testing.topics import create_topic


def request_bytes(topic: str, batch: int, version: str, port: int) -> bytes:
    value = {"user": "u-0001", "page": "/products/42", "ref": "search", "ms": 1234, "pad": "x" * 20}
    if version == "v2":
        body = json.dumps({"records": [{"value": value} for _ in range(batch)]}).encode()
        path, ct = f"/topics/{topic}", "application/vnd.kafka.json.v2+json"
    else:
        body = b"".join(json.dumps({"value": {"type": "JSON", "data": value}}).encode() for _ in range(batch))
        path, ct = f"/v3/clusters/c/topics/{topic}/records", "application/json"
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {ct}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


async def http_client(port: int, request: bytes, batch: int, until: float, counts: dict) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            if status == 200 and b'"error_code":null' in body or status == 200 and b'"error_code":200' in body:
                counts["ok"] += batch
            else:
                counts["refused"] += batch
    finally:
        writer.close()


async def http_round(port: int, topic: str, clients: int, batch: int, seconds: float, version: str) -> dict:
    request = request_bytes(topic, batch, version, port)
    counts = {"ok": 0, "refused": 0}
    start = time.perf_counter()
    await asyncio.gather(*[http_client(port, request, batch, start + seconds, counts) for _ in range(clients)])
    elapsed = time.perf_counter() - start
    return {"records_per_s": round(counts["ok"] / elapsed), "records": counts["ok"], "refused": counts["refused"],
            "seconds": round(elapsed, 2)}


def udp_round(ingest: IngestProcess, lines: int, rate: int) -> dict:
    before = ingest.stats()["endpoints"]["syslog-udp"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = ("127.0.0.1", ingest.syslog_port)
    # access-log lines as a web farm sends them: hosts, clients, paths and millisecond timestamps vary (4,096
    # made up front and sent in turn, so the sender spends nothing on formatting)
    texts = [(f"<134>1 2026-11-23T12:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z web-{i % 8:02d} nginx "
              f"{4700 + i % 13} access - 203.0.113.{i % 251} - - \"GET /products/{i % 997} HTTP/1.1\" 200 {5000 + i % 977} "
              f"\"-\" \"Mozilla/5.0\"").encode() for i in range(4096)]
    per_ms = max(rate // 1000, 1)
    start = time.perf_counter()
    sent = 0
    send = sock.sendto
    while sent < lines:
        for i in range(sent, sent + min(per_ms, lines - sent)):
            send(texts[i & 4095], address)
        sent += min(per_ms, lines - sent)
        due = start + sent / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    sent_s = time.perf_counter() - start
    deadline = time.monotonic() + 60
    while True:
        now = ingest.stats()["endpoints"]["syslog-udp"]
        settled = now["delivered"] + now["failed"] + now["dropped"] - (
            before["delivered"] + before["failed"] + before["dropped"])
        kernel = (now.get("kernel_drops") or 0) - (before.get("kernel_drops") or 0)
        if settled + kernel >= lines or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    delivered = now["delivered"] - before["delivered"]
    return {"offered_rate": rate, "sent_per_s": round(lines / sent_s), "lines_per_s": round(delivered / elapsed),
            "sent": lines, "written": delivered, "lost": lines - delivered,
            "dropped_at_bound": now["dropped"] - before["dropped"], "kernel_drops": kernel}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--lines", type=int, default=600_000)
    ap.add_argument("--udp-rate", type=int, nargs="*", default=[50_000, 100_000, 130_000])
    ap.add_argument("--http", nargs="*", default=["v2", "v3"], choices=["v2", "v3"],
                    help="REST Proxy APIs to measure (none: syslog only)")
    args = ap.parse_args()
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    print(json.dumps({"benchmark": "ingest", "machine": machine, "args": vars(args)}), flush=True)
    results: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(data_dir=os.path.join(tmp, "data")) as broker:
        topic = f"ingest-bench-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, 6)
        with IngestProcess(broker.bootstrap, syslog_topic=f"syslog-{uuid.uuid4().hex[:6]}",
                           log_path=os.path.join(tmp, "ingest.log")) as ingest:
            httpx.post(f"{ingest.url}/topics/{topic}", json={"records": [{"value": 1}]},
                       headers={"content-type": "application/vnd.kafka.json.v2+json"})  # metadata warm
            for r in range(args.rounds):
                for version in args.http:
                    out = asyncio.run(http_round(ingest.http_port, topic, args.clients, args.batch, args.seconds,
                                                 version))
                    out = {"measure": f"http_{version}", "round": r, **out}
                    results.setdefault(out["measure"], []).append(out)
                    print(json.dumps(out), flush=True)
                for rate in args.udp_rate:
                    out = {"measure": f"syslog_udp_{rate}", "round": r, **udp_round(ingest, args.lines, rate)}
                    results.setdefault(out["measure"], []).append(out)
                    print(json.dumps(out), flush=True)
    summary = {}
    for measure, rows in results.items():
        key = "records_per_s" if measure.startswith("http") else "lines_per_s"
        values = [x[key] for x in rows]
        summary[measure] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        if not measure.startswith("http"):
            summary[measure]["lost"] = [x["lost"] for x in rows]
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()

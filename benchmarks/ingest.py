"""Ingest throughput: HTTP produce (REST Proxy v2 and v3) and syslog over UDP, into a Freshet broker.

Starts a broker and ``freshet ingest serve`` on 127.0.0.1 (each its own process). Then, for ``--rounds``
rounds, alternating:

- HTTP: ``--clients`` (8) keep-alive connections, each sending requests of ``--batch`` (100) records of about
  100 B one after another (the next once the last is answered, i.e. acknowledged by the log), for
  ``--seconds``; records/s = records answered 200 / elapsed. Once with v2 bodies ({"records": [...]}), once
  with v3 (100 concatenated record objects); each both keyless (one value sent over and over: the producer
  packs a request's records into one batch) and keyed (each record its own key and value, ~108 B as JSON,
  6,400 keys: a request's records spread over the 6 partitions, as real traffic does). The load generator
  writes prebuilt requests on raw sockets (like wrk) so it costs the shared 2 cores little. With
  ``--baseline-src`` a second broker and server, from another source tree, are measured in turn with this
  checkout's in every round (the order alternating), so that a change is compared under the same load.
- syslog UDP: ``--lines`` RFC 5424 lines sent at each ``--udp-rate`` lines/s (paced per millisecond; a rate
  above the target shows the listener's capacity); lost =
  sent - records in the topic (the server's own counters tell where: dropped at the bound, or dropped by the
  kernel's socket buffer); lines/s = lines written / time until the last was in the log.

Prints one JSON object per measurement (with the server's CPU use and the machine's load average), then a
summary with medians and spreads. Targets (issues 29, 51): >= 100,000 records/s over HTTP, keyed too;
>= 100,000 syslog lines/s with 0 lost below that rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


KEYED_REQUESTS = 64  # distinct prebuilt requests cycled through: 6,400 keys


def record(i: int, keyed: bool) -> dict:
    """A v2 record of ~108 B as JSON: keyless, the same value every time (what the producer packs into one
    batch per request); keyed, its own key (a user) and value, so a request's records spread over the
    partitions."""
    if not keyed:
        return {"value": {"user": "u-0001", "page": "/products/42", "ref": "search", "ms": 1234, "pad": "x" * 20}}
    value = {"user": f"u-{i:06d}", "page": f"/products/{i % 997}", "ref": "search", "ms": 1000 + i % 9000}
    return {"key": f"user-{i:06d}", "value": value}


def request_bytes(topic: str, batch: int, version: str, port: int, keyed: bool = False, n: int = 0) -> bytes:
    """The ``n``-th prebuilt request (records n*batch ... n*batch+batch-1)."""
    records = [record(n * batch + i, keyed) for i in range(batch)]
    if version == "v2":
        body = json.dumps({"records": records}).encode()
        path, ct = f"/topics/{topic}", "application/vnd.kafka.json.v2+json"
    else:
        body = b"".join(json.dumps({**({"key": {"type": "STRING", "data": r["key"]}} if keyed else {}),
                                    "value": {"type": "JSON", "data": r["value"]}}).encode() for r in records)
        path, ct = f"/v3/clusters/c/topics/{topic}/records", "application/json"
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {ct}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


async def http_client(port: int, requests: list[bytes], batch: int, until: float, counts: dict,
                      first: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = first
    try:
        while time.perf_counter() < until:
            writer.write(requests[sent % len(requests)])
            sent += 1
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            written = body.count(b'"error_code":null') + body.count(b'"error_code":200')  # v2, v3
            if status == 200 and written == batch:
                counts["ok"] += batch
            else:
                counts["refused"] += batch
    finally:
        writer.close()


async def http_round(port: int, topic: str, clients: int, batch: int, seconds: float, version: str,
                     keyed: bool = False) -> dict:
    requests = [request_bytes(topic, batch, version, port, keyed, n)
                for n in range(KEYED_REQUESTS if keyed else 1)]
    counts = {"ok": 0, "refused": 0}
    start = time.perf_counter()
    await asyncio.gather(*[http_client(port, requests, batch, start + seconds, counts, c * 8)
                           for c in range(clients)])
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
    ap.add_argument("--records", nargs="*", default=["keyless", "keyed"], choices=["keyless", "keyed"],
                    help="keyless: one value sent over and over; keyed: each record its own key and value")
    ap.add_argument("--baseline-src", metavar="DIR",
                    help="a second broker and server run from this source tree (`git archive HEAD src | tar -x"
                         " -C DIR`), measured alternately with this checkout's in every round")
    args = ap.parse_args()
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    print(json.dumps({"benchmark": "ingest", "machine": machine, "args": vars(args)}), flush=True)
    results: dict[str, list] = {}
    topic = f"ingest-bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        sides = {"current": stack.enter_context(_side(tmp, "current", None, topic))}
        if args.baseline_src:
            sides["baseline"] = stack.enter_context(_side(tmp, "baseline", args.baseline_src, topic))
        for r in range(args.rounds):
            for version in args.http:
                for records in args.records:
                    # alternate which side goes first, so a drift in the machine's load favours neither
                    for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                        broker, ingest = sides[name]
                        cpu = _cpu_s(ingest.process.pid), _cpu_s(broker.pid)
                        out = asyncio.run(http_round(ingest.http_port, topic, args.clients, args.batch,
                                                     args.seconds, version, records == "keyed"))
                        out["server_cores"] = round((_cpu_s(ingest.process.pid) - cpu[0]) / out["seconds"], 2)
                        out["broker_cores"] = round((_cpu_s(broker.pid) - cpu[1]) / out["seconds"], 2)
                        out["loadavg_1m"] = round(os.getloadavg()[0], 1)
                        label = f"http_{version}_{records}" + ("" if name == "current" else "_baseline")
                        out = {"measure": label, "round": r, **out}
                        results.setdefault(out["measure"], []).append(out)
                        print(json.dumps(out), flush=True)
            for rate in args.udp_rate:
                out = {"measure": f"syslog_udp_{rate}", "round": r,
                       **udp_round(sides["current"][1], args.lines, rate)}
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


@contextlib.contextmanager
def _side(tmp: str, name: str, src: str | None, topic: str):
    """A broker and ``freshet ingest serve`` run from this checkout, or both from the source tree ``src``,
    with ``topic`` (6 partitions) created and the server's metadata warm."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = os.path.join(os.path.abspath(src), "src")
    try:
        with contextlib.ExitStack() as stack:
            broker = stack.enter_context(BrokerProcess(data_dir=os.path.join(tmp, f"data-{name}")))
            create_topic(broker.bootstrap, topic, 6)
            ingest = stack.enter_context(IngestProcess(
                broker.bootstrap, syslog_topic=f"syslog-{uuid.uuid4().hex[:6]}",
                log_path=os.path.join(tmp, f"ingest-{name}.log")))
            httpx.post(f"{ingest.url}/topics/{topic}", json={"records": [{"value": 1}]},
                       headers={"content-type": "application/vnd.kafka.json.v2+json"})  # metadata warm
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
            yield broker, ingest
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()

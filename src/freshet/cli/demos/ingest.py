"""``freshet demo ingest``: events in and out without a Kafka client, step by step.

A web shop's events arrive the ways most sources send them: a REST Proxy request (as curl would send it),
web-server log lines over syslog, StatsD metrics over UDP. Each is read back from the log as a Kafka client
sees it. A webhook sink then posts the orders to a receiver that checks every signature, and a record the
receiver refuses ends in the dead-letter topic. Every step checks what it shows; the demo exits 1 if one
does not hold.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click

from freshet.client import TopicAdmin
from freshet.local import free_port

from .preamble import Demo, data_dir_option, json_values, read_records

SECRET = b"demo-secret"


@click.command("ingest")
@data_dir_option("ingest")
def ingest_demo(data_dir: str) -> None:
    """HTTP (REST Proxy), syslog and StatsD in; a signed webhook with a dead-letter topic out."""
    with Demo(data_dir) as demo:
        _ingest(demo)
        demo.finish()


def _ingest(demo: Demo) -> None:
    import httpx  # the ingest extra: imported when the demo runs, so the CLI works without it

    from freshet.ingest.http_app import HttpSettings
    from freshet.ingest.server import IngestServer, IngestSettings
    from freshet.ingest.webhook import WebhookSettings, WebhookSink, verify_signature

    console, check, bootstrap = demo.console, demo.check, demo.bootstrap
    http_port, syslog_port, statsd_port = free_port(), free_port(), free_port()
    server = IngestServer(IngestSettings(bootstrap=bootstrap, http_port=http_port, syslog_udp_port=syslog_port,
                                         syslog_tcp_port=syslog_port, statsd_port=statsd_port,
                                         http=HttpSettings(), name="demo"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True, name="ingest")
    try:
        TopicAdmin(bootstrap).create_topic("orders", 2)
        thread.start()
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise click.ClickException("the ingest server did not start") from None
                time.sleep(0.1)
        console.print(f"[bold]1. one server in front of the log[/]: broker {bootstrap}; HTTP {url}, syslog udp+tcp "
                      f":{syslog_port}, StatsD udp :{statsd_port}")

        console.print("[bold]2. a REST Proxy request[/], as curl sends it "
                      f"(POST {url}/v3/clusters/any/topics/orders/records):")
        orders = [{"order": f"o{i}", "total": 10 * i} for i in range(1, 4)] + [{"order": "o4", "total": -1}]
        body = "\n".join(json.dumps({"key": {"type": "STRING", "data": o["order"]},
                                     "value": {"type": "JSON", "data": o}}) for o in orders)
        answer = httpx.post(url + "/v3/clusters/any/topics/orders/records", content=body,
                            headers={"content-type": "application/json"})
        reports = [json.loads(line) for line in answer.text.splitlines()]
        for r in reports:
            console.print(f"    error_code {r['error_code']}: partition {r['partition_id']}, offset {r['offset']}")
        stored = {(m.partition(), m.offset()): json.loads(m.value()) for m in read_records(bootstrap, "orders")}
        check(all(stored.get((r["partition_id"], r["offset"])) == o for r, o in zip(reports, orders)),
              "each answer names the partition and offset where the log holds that order (answered after acks=all)")
        refused = httpx.post(url + "/v3/clusters/any/topics/no-such-topic/records", json={"value": {"data": 1}})
        check(refused.status_code == 404, f"an unknown topic: {refused.status_code} {refused.json()['message']}")

        console.print("[bold]3. web-server logs over syslog[/] (RFC 5424 over UDP, RFC 3164 over TCP):")
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.sendto(b'<134>1 2026-11-23T12:00:00.000Z web-01 nginx 4711 access - GET /checkout 200',
                   ("127.0.0.1", syslog_port))
        with socket.create_connection(("127.0.0.1", syslog_port)) as tcp:
            tcp.sendall(b"<131>Nov 23 12:00:01 web-02 nginx[4712]: upstream timed out\n")
        events = json_values(bootstrap, "syslog", at_least=2)
        for e in events:
            console.print(f"    {e['hostname']} {e['app_name']} {e['severity_name']}: {e['message']} ({e['format']})")
        check({(e["hostname"], e["severity_name"]) for e in events} == {("web-01", "info"), ("web-02", "err")},
              "both lines are in topic syslog as JSON, host, severity and message apart")

        console.print("[bold]4. metrics over StatsD[/] (UDP; `freshet run statsd-rollup` rolls them up per 10 s):")
        udp.sendto(b"checkout.requests:1|c\ncheckout.requests:1|c|@0.5\ncheckout.latency:42|ms\nnot statsd",
                   ("127.0.0.1", statsd_port))
        metrics = json_values(bootstrap, "metrics", at_least=3)
        for m in metrics:
            console.print(f"    {m['name']} {m['type']} {m['value']} (sample rate {m['sample_rate']})")
        stats = server.stats()["endpoints"]["statsd"]
        check(len(metrics) == 3 and stats["malformed"] == 1, "three metrics in topic metrics; the bad line counted")

        console.print("[bold]5. orders out by webhook[/]: each signed; the one the receiver refuses goes to"
                      " the dead-letter topic:")
        received: list = []

        class Receiver(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers["content-length"]))
                ok = verify_signature(SECRET, raw, self.headers["x-freshet-signature"])
                order = json.loads(raw)["value"]["data"]
                received.append((order["order"], ok, self.headers["idempotency-key"]))
                self.send_response(200 if ok and order["total"] >= 0 else 422)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        site = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=site.serve_forever, daemon=True).start()
        sink = WebhookSink(WebhookSettings(bootstrap=bootstrap, topic="orders", secret=SECRET, backoff_s=0.05,
                                           url=f"http://127.0.0.1:{site.server_address[1]}/orders"))
        counts = sink.run(max_idle_s=2)
        site.shutdown()
        for order, ok, key in received:
            console.print(f"    {order}: signature {'valid' if ok else 'INVALID'}, Idempotency-Key {key}")
        dead = read_records(bootstrap, "orders.dead-letter")
        check(counts.delivered == 3 and all(ok for _, ok, _ in received), "three orders delivered, every signature valid")
        reason = dict(dead[0].headers() or []).get("freshet.dead-letter.reason", b"") if dead else b""
        check([d.key() for d in dead] == [b"o4"] and reason.startswith(b"HTTP 422"),
              f"the order the receiver refused is in orders.dead-letter ({reason.decode()[:40].removesuffix(': ')})")

        console.print("[bold]6. what the server counted[/] (also on /metrics and the dashboard's Ingest tab):")
        for name, e in server.stats()["endpoints"].items():
            console.print(f"    {name:11} received {e['received']:3}  delivered {e['delivered']:3}  rejected {e['rejected']}"
                          f"  dropped {e['dropped']}  malformed {e['malformed']}")
    finally:
        server.stop()
        thread.join(30)

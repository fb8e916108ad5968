"""``freshet demo access-logs`` (``make demo``): the whole path on one machine, watched live."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from datetime import datetime

import click
from confluent_kafka import Consumer, TopicPartition
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from freshet.client import TopicAdmin, consumer_config

from ..common import stderr_to
from ..gen_cmd import produce_access_logs
from .preamble import Demo


@click.command("access-logs")
# checked before anything starts (was: a broker, the dashboard and Spark started, then "generator failed")
@click.option("--seconds", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="How long the generator runs.")
@click.option("--rate", default=2000.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Events per second.")
@click.option("--time-scale", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Event time runs this much faster than the clock, so minute windows close every few seconds.")
@click.option("--pipelines/--no-pipelines", default=True, show_default=True,
              help="Run the Spark pipelines (needs Java and the spark extra).")
@click.option("--data-dir", default="./demo-data", show_default=True,
              help="Kept (each run has a topic of its own); the other demos' directories are inside it.")
@click.option("--dashboard-port", default=8080, show_default=True, help="A free port is taken when this one is busy.")
@click.option("--secure/--plaintext", default=True, show_default=True,
              help="A SASL_SSL listener (SCRAM over TLS, a generated CA and user) that every client uses.")
def access_logs(seconds: float, rate: float, time_scale: float, pipelines: bool, data_dir: str,
                dashboard_port: int, secure: bool) -> None:
    """Broker, generated web access logs, Spark window pipelines: results shown live."""
    with Demo(data_dir, fresh=False, broker=False) as demo:
        console, data_dir = demo.console, demo.data_dir
        secured = _secure_demo(data_dir) if secure else None
        broker = demo.start_broker(metrics=True, listeners=["SASL_SSL"] if secured else None,
                                   extra_args=secured["broker_args"] if secured else None)
        console.print(f"[bold]broker[/] listening on {broker.bootstrap} (data in {data_dir}/log, "
                      f"log in {broker.log_path})")
        if secured:
            os.environ.update(secured["client_env"])  # every client of this demo (and its children) authenticates
            console.print(f"[bold]security[/] SASL_SSL: SCRAM-SHA-256 as user 'demo' over TLS (CA {secured['ca']}); "
                          f"client settings in {secured['properties']} (freshet --command-config)")
        dashboard = _start_dashboard(broker.bootstrap, broker.metrics_url, data_dir, dashboard_port)
        console.print(f"[bold]dashboard[/] on {dashboard[1]}")
        stop = threading.Event()
        produced = [0]
        errors: list[str] = []
        try:
            admin = TopicAdmin(broker.bootstrap)
            topic = f"access-logs-{int(time.time())}"
            admin.create_topic(topic, 6)
            console.print(f"[bold]topic[/] {topic}: 6 partitions")
            start_ms = int(time.time() // 60 * 60_000)  # event time from a whole minute: the first is a full one

            def run_generator() -> None:
                try:
                    produced[0] = produce_access_logs(broker.bootstrap, topic, rate, None, seconds, 0.05, 0.01, 1,
                                                      on_progress=lambda n: produced.__setitem__(0, n),
                                                      time_scale=time_scale, stop=stop, start_ms=start_ms)
                except Exception as exc:  # shown to the user below
                    errors.append(str(exc))

            generator = threading.Thread(target=run_generator, daemon=True)
            if pipelines:
                with stderr_to(os.path.join(data_dir, "spark.log")):
                    _live_pipelines(console, broker.bootstrap, topic, data_dir, generator, produced, errors)
            else:
                generator.start()
                _live_records(console, broker.bootstrap, topic, generator, produced, seconds)
            if errors:
                console.print(f"[red]generator failed:[/] {errors[0]}")
                raise SystemExit(1)
        except KeyboardInterrupt:
            console.print("stopping")
        finally:
            stop.set()
            dashboard[0].terminate()
            dashboard[0].wait(15)


# how long the Spark queries get, once the generator stops, to read what it wrote and commit the windows that
# closed: seconds on a quiet machine; several minutes where Spark is still on its first microbatches (a busy one)
CATCH_UP_S = 600


def _secure_demo(data_dir: str) -> dict:
    """A CA and broker certificate, a user ``demo`` with a fresh password: what the demo's broker and clients use."""
    import secrets

    from freshet.broker.security.credentials import CredentialStore, ScramCredential

    from ..security_cmd import _issue, _write

    security_dir = os.path.join(data_dir, "security")
    os.makedirs(security_dir, exist_ok=True)
    ca_key, ca_cert = _issue("Freshet demo CA", None, None, 30, ca=True)
    _write(security_dir, "ca", ca_key, ca_cert)
    key, cert = _issue("freshet-broker", ca_key, ca_cert, 30, hosts=("127.0.0.1", "localhost"))
    _write(security_dir, "broker", key, cert)
    password = secrets.token_urlsafe(12)
    store = CredentialStore(os.path.join(data_dir, "log", "security", "scram-credentials.json"))
    store.apply([("demo", ScramCredential.from_password(m, password)) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")], [])
    ca = os.path.join(security_dir, "ca.pem")
    env = {"FRESHET_SECURITY_PROTOCOL": "SASL_SSL", "FRESHET_SASL_MECHANISM": "SCRAM-SHA-256",
           "FRESHET_SASL_USERNAME": "demo", "FRESHET_SASL_PASSWORD": password, "FRESHET_SSL_CA_LOCATION": ca}
    properties = os.path.join(security_dir, "client.properties")
    fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=demo\n"
                f"sasl.password={password}\nssl.ca.location={ca}\n")
    return {"ca": ca, "properties": properties, "client_env": env,
            "broker_args": ["--super-user", "User:demo", "--ssl-certfile", os.path.join(security_dir, "broker.pem"),
                            "--ssl-keyfile", os.path.join(security_dir, "broker-key.pem")]}


def _start_dashboard(bootstrap: str, metrics_url: str, data_dir: str, port: int):
    """The dashboard as its own process, on ``port`` when free."""
    import socket
    import subprocess

    from freshet.local import free_port

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            port = free_port()
    with open(os.path.join(data_dir, "dashboard.log"), "ab") as log:  # the child keeps its own copy
        proc = subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "dashboard", "--port", str(port),
                                 "--bootstrap", bootstrap, "--broker-metrics", metrics_url], stdout=log, stderr=log)
    return proc, f"http://127.0.0.1:{port}/"


def _live_records(console, bootstrap, topic, generator, produced, seconds) -> None:
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
    consumed = 0
    per_partition: Counter = Counter()
    recent: list[str] = []
    start = time.monotonic()
    with Live(console=console, refresh_per_second=4) as live:
        while generator.is_alive() or consumed < produced[0]:
            for msg in consumer.consume(2000, 0.25):
                if msg.error():
                    continue
                consumed += 1
                per_partition[msg.partition()] += 1
                recent = (recent + [msg.value().decode()])[-8:]
            if time.monotonic() - start > seconds + 30:
                break
            table = Table(title="consumed per partition")
            for p in range(6):
                table.add_column(f"p{p}", justify="right")
            table.add_row(*(str(per_partition[p]) for p in range(6)))
            live.update(Group(Panel("\n".join(r[:150] for r in recent) or "waiting...", title="latest records"),
                              table, f"produced {produced[0]}  consumed {consumed}"))
    consumer.close()
    console.print(f"[green]done:[/] produced {produced[0]}, consumed {consumed} through the broker")


def _live_pipelines(console, bootstrap, topic, data_dir, generator, produced, errors) -> None:
    from freshet.pipelines.catalog import CATALOG
    from freshet.pipelines.runner import PipelineSpec, source
    from freshet.spark import session
    from freshet.spark.progress import LateRowsCounter
    from freshet.spark.session import stop_gracefully

    console.print(f"[bold]spark[/] starting a local session (about 10 s on 2 cores; log in {data_dir}/spark.log)...")
    spark = session("freshet-demo")
    late = LateRowsCounter.install(spark)
    from freshet.spark.registry import PipelineReporter

    reporter = PipelineReporter(bootstrap, spark)
    spark.streams.addListener(reporter)  # the queries appear on the dashboard
    spec = PipelineSpec("demo", topic, "", bootstrap, "", trigger_seconds=1.0)
    raw = source(spark, spec)
    minutes: dict = {}
    users: dict = {}
    sizes: dict = {}
    lock = threading.Lock()

    def keep(target: dict, key: str):
        def write(df, _batch_id):
            rows = df.collect()
            with lock:
                for r in rows:
                    target[r[key]] = r
        return write

    def show(name: str, target: dict, key: str, checkpoint: str):
        """A catalog pipeline's updated windows kept in ``target`` for the live table."""
        return lambda: (CATALOG[name].result(raw).writeStream.outputMode("update").foreachBatch(keep(target, key))
                        .option("checkpointLocation", os.path.join(checkpoints, checkpoint))
                        .trigger(processingTime="1 second").queryName(name).start())

    checkpoints = os.path.join(data_dir, "checkpoints", topic)
    starts = [
        show("requests-per-minute", minutes, "window_start", "rpm"),
        show("unique-users", users, "window_start", "users"),
        show("size-percentiles", sizes, "window_start", "sizes"),
        lambda: (CATALOG["requests-per-minute"].result(raw).writeStream.outputMode("append").format("parquet")
                 .option("path", os.path.join(data_dir, "warehouse", "requests_per_minute"))
                 .option("checkpointLocation", os.path.join(checkpoints, "parquet"))
                 .trigger(processingTime="2 seconds").queryName("requests-per-minute-parquet").start()),
    ]
    queries: list = []

    def render():
        table = Table(title="live window results (event time)")
        # fits 80 columns: users per hour exact (HyperLogLog), response size p50/p99 over 5 minutes
        for col in ("minute", "requests", "vs prev", "MB", "5xx", "users/h", "p50/p99 size"):
            table.add_column(col, justify="right", no_wrap=True)
        watermark = query_watermark(queries[0])
        with lock:
            for row in window_rows(minutes, users, sizes, watermark):
                table.add_row(*row)
        dropped = sum(late.dropped(q.id) for q in queries)
        status = (f"produced {produced[0]:,} events   late events dropped by the watermark: {dropped}   "
                  f"batches: {max((q.lastProgress or {}).get('batchId', 0) for q in queries)}\n"
                  f"watermark {f'{datetime.fromtimestamp(watermark):%H:%M:%S}' if watermark else 'none yet'}: "
                  "a minute ending after it is still open (its events may yet come) and is not compared")
        return Group(table, status)

    try:
        for start in starts:
            # one after another: each query's freshet source has Spark start a Python process for it, which must
            # connect back within Spark's fixed 10 s; four interpreters importing pyarrow at once on a busy machine
            # took longer ("Python worker failed to connect back"). Waiting for data (or a batch run) says it is up
            queries.append(start())
            deadline = time.monotonic() + 120
            while not _source_up(queries[-1]) and queries[-1].isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            _fail_if_stopped(console, queries)
        generator.start()
        console.print("[bold]pipelines[/] requests per minute (and vs the minute before: spike above 3x, drop below "
                      "1/3), unique users per hour (exact, and HyperLogLog's estimate), p50/p99 response size per 5 "
                      f"minutes (parquet copy in {data_dir}/warehouse)")
        with Live(render(), console=console, refresh_per_second=2) as live:
            while generator.is_alive():
                time.sleep(0.5)
                _fail_if_stopped(console, queries)
                live.update(render())
            # let the last events through: until every query has read up to the end offsets the generator
            # left and then run a batch with nothing new to read (the batch Spark runs to move the watermark,
            # or its idle report), so the watermark it reports counts the last events, every minute they close
            # is shown closed and the Parquet sink has committed those minutes. On a busy machine Spark may
            # still be on its first microbatches when the generator ends: the deadline is for that machine
            ends = {(topic, p): high for p, (_, high) in enumerate(TopicAdmin(bootstrap).offsets(topic, 6))}
            deadline = time.monotonic() + CATCH_UP_S
            while not all(_caught_up(q, ends) for q in queries):
                if time.monotonic() > deadline:
                    console.print(f"[yellow]gave up waiting after {CATCH_UP_S} s:[/] the Spark queries have read "
                                  f"{min(sum(_read_offsets(q).values()) for q in queries):,} of "
                                  f"{sum(ends.values()):,} events; showing what they have")
                    break
                time.sleep(0.5)
                _fail_if_stopped(console, queries)
                live.update(render())
            live.update(render())
    finally:
        stop_gracefully(queries)
        for q in queries:
            reporter.publish(q.name, "stopped")
        reporter.close()
        spark.stop()
    console.print()
    console.print(f"[green]done:[/] {produced[0]:,} events through the broker and {len(queries)} Spark queries")


def _source_up(query) -> bool:
    """``query``'s sources are initialized: it has asked them for offsets (its Python source process is up)."""
    return query.lastProgress is not None or query.status["message"] in (
        "Waiting for data to arrive", "Waiting for next trigger", "Processing new data")


def _fail_if_stopped(console, queries) -> None:
    """A query that has stopped on an error ends the demo: one line with Spark's message, exit status 1."""
    for q in queries:
        if not q.isActive:
            error = q.exception()
            reason = (str(error).strip().splitlines() or ["stopped"])[0] if error else "stopped"
            console.print(f"[red]spark query {q.name} failed:[/] {reason} (details in spark.log)")
            raise SystemExit(1)


def _read_offsets(query) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the end offset of the last batch ``query`` has run (what it has read up to)."""
    import json

    from freshet.spark.offsets import from_json

    read: dict[tuple[str, int], int] = {}
    for source in (query.lastProgress or {}).get("sources", []):
        end = source.get("endOffset") or {}
        read.update(from_json(json.loads(end) if isinstance(end, str) else end))
    return read


def _caught_up(query, ends: dict[tuple[str, int], int]) -> bool:
    """``query`` has read up to ``ends`` and its last batch (or idle report) had nothing new: the output of the
    batches that read them, and of the one that moved the watermark past them, is committed."""
    read = _read_offsets(query)
    return (all(read.get(tp, 0) >= end for tp, end in ends.items())
            and (query.lastProgress or {}).get("numInputRows", 1) == 0)


def query_watermark(query) -> float:
    """The event-time watermark ``query`` last reported, as seconds since the epoch (0 before it has one)."""
    progress = query.lastProgress or {}
    stamp = (progress.get("eventTime") or {}).get("watermark")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0


def window_rows(minutes: dict, users: dict, sizes: dict, watermark: float, last: int = 10) -> list[tuple[str, ...]]:
    """The live table's rows, for the ``last`` minutes: minute, requests, versus the minute before, MB, 5xx,
    users that hour, p50/p99 size of those 5 minutes. ``minutes``, ``users``, ``sizes``: the window rows of
    requests-per-minute, unique-users, size-percentiles by window start. A minute whose end is past the
    ``watermark`` (seconds since the epoch) is still filling (events for it may yet come): it shows ``open``,
    compared with nothing; a closed minute is compared with the one before, closed too."""
    from freshet.pipelines.access_logs import trend_flag

    ordered = sorted(minutes)
    rows = []
    for i in range(max(len(ordered) - last, 0), len(ordered)):
        w = ordered[i]
        r = minutes[w]
        if r.window_end.timestamp() > watermark:
            versus = "open"
        else:
            previous = minutes[ordered[i - 1]].requests if i > 0 else None
            ratio = r.requests / previous if previous else None
            flag = trend_flag(ratio)
            versus = f"x{ratio:.1f}{' ' + flag if flag else ''}" if ratio is not None else "-"
        hour = max((h for h in users if h <= w), default=None)
        five = max((f for f in sizes if f <= w), default=None)
        u = users.get(hour)
        s = sizes.get(five)
        rows.append((w.strftime("%H:%M"), str(r.requests), versus, f"{r.bytes / 1e6:.1f}", str(r.server_errors),
                     f"{u.unique_exact} ({u.unique_approx})" if u else "-",
                     f"{s.p50_size:,}/{s.p99_size:,}" if s else "-"))
    return rows

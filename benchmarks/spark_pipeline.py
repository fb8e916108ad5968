"""Spark pipeline throughput and latency through the freshet source, against Spark's own Parquet stream.

Loads 2,000,000 JSON events ({"ts": ms, "user": ..., "url": ..., "bytes": ...}) into a 6-partition
topic and the same rows (the source's columns) into Parquet files, then measures, each with 500k rows per microbatch
and steady-state rows/s (after one batch read of each source to warm up the JVM and the Python workers;
the sources take --rounds turns and the last counts; the first batch of each query is reported apart):
  (a) read-only into the noop sink, freshet source vs Parquet file stream;
  (b) parse JSON + 1-minute tumbling count with a watermark, freshet vs Parquet;
and, under a 0.25 s processing-time trigger (--trigger, repeatable: a live query for each, taking turns
--live-rounds times) with a producer writing 20,000 events/s for 30 s, the event-to-result latency of every
event (its producer timestamp -> the end of the microbatch whose result includes it), p50 and p99, with each
phase of the microbatches (Spark's progress report: latestOffset, queryPlanning, getBatch, addBatch, walCommit,
commitOffsets) and the CPU each process took. --only-live skips the throughput runs (and their load);
--real-time first tries Spark's real-time mode over the source and prints what Spark says.
Prints one JSON object per result; each throughput result also says where the CPU went (cpu_s: seconds of
CPU of the broker, the Spark JVM and Spark's Python workers while the query ran, from /proc on Linux).

--compare-cluster runs (b) alone on local[2] and on a Spark standalone cluster of two one-core workers on this
machine (freshet.local.spark_cluster, as `freshet spark start-cluster` starts it), --rounds alternating turns, each
in a process of its own (one SparkContext per process), the topic loaded once; it prints the cluster's start-up
time, each engine's session start and steady rows/s, and the medians' ratio. --master spark://HOST:PORT compares
with a cluster that runs already instead.

--ceiling adds two sources to (a), to show where the limit lies: `arrow_files`, a Python data source
yielding the same rows as ready Arrow batches from memory-mapped files (what Spark's Python data
source path costs with no reading at all), and `kafka_consume_only`, the freshet source with its read
cut down to confluent-kafka's consume() of the same ranges (the floor of any reader built on it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from datetime import datetime

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from freshet.local import BrokerProcess
from freshet.spark.source import FreshetDataSource, FreshetStreamReader

ROWS_PER_BATCH = 500_000
JSON_SCHEMA = "ts long, user string, url string, bytes long"


def make_values(n: int, start_ms: int) -> list[bytes]:
    urls = [f"/page/{i}" for i in range(50)]
    return [b'{"ts": %d, "user": "u%d", "url": "%s", "bytes": %d}' % (start_ms + i * 5, i % 5000,
                                                                      urls[i % 50].encode(), 100 + i % 900)
            for i in range(n)]


def produce_all(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000})
    chunk = 10_000
    for i in range(0, len(values), chunk):
        batch = [{"value": v} for v in values[i:i + chunk]]
        while True:
            try:
                producer.produce_batch(topic, batch, partition=(i // chunk) % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)


def windowed(df):
    from pyspark.sql import functions as F

    events = df.select(F.from_json(F.col("value").cast("string"), JSON_SCHEMA).alias("e")).select("e.*")
    events = events.withColumn("event_time", F.timestamp_millis("ts"))
    return events.withWatermark("event_time", "1 minute").groupBy(F.window("event_time", "1 minute")).count()


class ArrowFiles(DataSource):
    """The ceiling of a Python data source here: a stream of Arrow IPC files, one per microbatch, each
    already holding the source's columns in record batches of the freshet source's size. ``read()``
    memory-maps its share of a file and yields the batches as they lie: no Kafka, no decoding, no
    column building. Whatever this costs is what any Python data source costs Spark."""

    @classmethod
    def name(cls) -> str:
        return "arrow_files"

    def schema(self):
        from freshet.spark.source import source_schema

        return source_schema()

    def streamReader(self, schema):
        return ArrowFilesReader(self.options["path"], schema)


class ArrowFilePart(InputPartition):
    def __init__(self, path: str, batches: list[int]) -> None:
        super().__init__(None)
        self.path = path
        self.batches = batches


class ArrowFilesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, directory: str, schema) -> None:
        self.files = sorted(os.path.join(directory, f) for f in os.listdir(directory))

    def initialOffset(self) -> dict:
        return {"file": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        return {"file": min(start["file"] + 1, len(self.files))}  # a file per microbatch

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict, end: dict) -> list:
        import pyarrow as pa

        cores = len(os.sched_getaffinity(0))
        parts = []
        for path in self.files[start["file"]:end["file"]]:
            with pa.memory_map(path) as source:
                count = pa.ipc.open_file(source).num_record_batches
            parts += [ArrowFilePart(path, list(range(i, count, cores))) for i in range(min(cores, count))]
        return parts

    def read(self, partition: ArrowFilePart):
        import pyarrow as pa

        with pa.memory_map(partition.path) as source:
            reader = pa.ipc.open_file(source)
            for i in partition.batches:
                yield reader.get_batch(i)


class ConsumeOnly(FreshetDataSource):
    """The freshet source with its read cut down to confluent-kafka's consume() of the same ranges:
    the records are fetched and handed to Python as Message objects, then dropped, and Spark gets
    ready Arrow batches of as many rows. What this costs is the floor of any reader built on
    confluent-kafka."""

    @classmethod
    def name(cls) -> str:
        return "kafka_consume_only"

    def streamReader(self, schema):
        return ConsumeOnlyReader(self.options, schema)


class ConsumeOnlyReader(FreshetStreamReader):
    def read(self, partition):
        import numpy as np
        import pyarrow as pa
        from confluent_kafka import Message, TopicPartition
        from pyspark.sql.pandas.types import to_arrow_schema

        from freshet.spark.source import (
            ROWS_PER_ARROW_BATCH,
            cyclic_gc_paused,
            partition_ranges,
            range_consumer,
        )

        ranges = partition_ranges(partition)
        if not ranges:
            return
        schema = to_arrow_schema(self.schema, timezone="UTC")
        n = ROWS_PER_ARROW_BATCH
        template = pa.RecordBatch.from_arrays([
            pa.nulls(n, pa.binary()), pa.repeat(pa.scalar(make_values(1, 1_700_000_000_000)[0], pa.binary()), n),
            pa.repeat(pa.scalar(ranges[0].topic, pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
            pa.array(np.arange(n, dtype=np.int64)), pa.repeat(pa.scalar(1_700_000_000_000_000, schema.field(5).type), n),
            pa.repeat(pa.scalar(0, pa.int32()), n)], schema=schema)
        consumer = range_consumer(ranges)  # the freshet source's own settings
        ends = np.zeros(max(r.partition for r in ranges) + 1, dtype=np.int64)
        for r in ranges:
            ends[r.partition] = r.end
        left = sum(r.end - r.start for r in ranges)
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
        try:
            while left > 0:
                with cyclic_gc_paused():  # as the freshet source does
                    messages = consumer.consume(min(10_000, left), 0.5)
                    if any(map(Message.error, messages)):  # end-of-partition events, as the source checks
                        messages = [m for m in messages if m.error() is None]
                    if not messages:
                        continue
                    partitions = np.fromiter(map(Message.partition, messages), np.int64, len(messages))
                    offsets = np.fromiter(map(Message.offset, messages), np.int64, len(messages))
                    got = int(np.count_nonzero(offsets < ends[partitions]))
                    del messages
                left -= got
                while got > 0:
                    yield template.slice(0, min(n, got))
                    got -= n
        finally:
            consumer.close()


def measure(query) -> dict:
    query.awaitTermination()
    if query.exception():
        raise RuntimeError(query.exception())
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    steady = batches[1:] or batches
    rows = sum(p["numInputRows"] for p in steady)
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {"rows_per_s": round(rows / (ms / 1000)), "batches": len(batches),
            "first_batch_s": round(batches[0]["durationMs"]["triggerExecution"] / 1000, 2),
            "median_batch_s": round(statistics.median(p["durationMs"]["triggerExecution"] for p in steady) / 1000, 2),
            "rows": sum(p["numInputRows"] for p in batches)}


def cpu_seconds(broker_pid: int) -> dict:
    """CPU seconds used so far by the broker, the Spark JVM (this process's java child) and Spark's Python
    workers (the JVM's python descendants), from /proc; {} where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    procs = {}  # pid -> (command, parent pid, CPU seconds of it and its waited-for children)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone since the listing
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(entry)] = (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[1]),
                             sum(int(x) for x in fields[11:15]) / tick)

    def under(pid: int, ancestor: int) -> bool:
        while pid in procs and pid > 1:
            pid = procs[pid][1]
            if pid == ancestor:
                return True
        return False

    java = [pid for pid, (name, ppid, _) in procs.items() if ppid == os.getpid() and name == "java"]
    out = {"broker": procs.get(broker_pid, ("", 0, 0.0))[2], "spark_jvm": 0.0, "python_workers": 0.0}
    for pid, (name, _, cpu) in procs.items():
        if java and pid == java[0]:
            out["spark_jvm"] += cpu
        elif java and under(pid, java[0]) and name.startswith("python"):
            out["python_workers"] += cpu
    return out


LIVE_PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets",
               "triggerExecution")


class PacedProducer(threading.Thread):
    """``rate`` JSON events a second for ``seconds``, round-robin over the topic's partitions. librdkafka stamps
    each record at produce() (its create time), where the event's latency is counted from."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float, partitions: int = 6) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate, self.seconds, self.partitions = bootstrap, topic, rate, seconds, partitions
        self.sent = 0

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        start = time.monotonic()
        while time.monotonic() - start < self.seconds:
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                producer.produce(self.topic, b'{"ts": %d, "user": "u%d", "url": "/x", "bytes": 1}'
                                 % (int(time.time() * 1000), self.sent % 5000), partition=self.sent % self.partitions)
                self.sent += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)


def _offsets(value) -> dict:
    return json.loads(value) if isinstance(value, str) else (value or {})


def read_so_far(query, topic: str) -> int:
    """How many records of ``topic`` the query's finished microbatches have read (the last one's end offsets)."""
    last = query.lastProgress
    end = _offsets(last["sources"][0]["endOffset"]).get(topic) if last else None
    return sum(int(v) for v in end.values()) if end else 0


def wait_read(query, topic: str, count: int, timeout_s: float = 180.0) -> float:
    """Wait until the query has read ``count`` records of ``topic``; the seconds it took."""
    began = time.monotonic()
    while read_so_far(query, topic) < count:
        if query.exception():
            raise RuntimeError(query.exception())
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the live query read {read_so_far(query, topic)} of {count} records in {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic() - began


def live_once(spark, broker, admin, trigger_s: float, args, work: str) -> dict:
    """One live query (parse JSON + 1-minute window, update mode, noop sink) under a ``trigger_s`` processing-time
    trigger over a new 6-partition topic: ``--warmup-seconds`` of paced events read first and not counted, then
    ``--seconds`` at ``--rate``. Each counted event's latency runs from its producer timestamp to the end of the
    microbatch whose result includes it; every counted batch's phases come from Spark's progress report."""
    from pyspark.sql import functions as F

    from freshet.spark.session import stop_gracefully

    topic = f"live-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 6)])[topic].result(30)
    raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .options(**dict(kv.split("=", 1) for kv in args.source_option)).load())
    query = (windowed(raw).writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", os.path.join(work, f"ck-{topic}"))
             .trigger(processingTime=f"{trigger_s} seconds").start())
    try:
        warm = PacedProducer(broker.bootstrap, topic, args.rate, args.warmup_seconds)
        warm.start()
        warm.join()
        wait_read(query, topic, warm.sent)
        counted_after = query.lastProgress["batchId"]
        cpu_before = cpu_seconds(broker.proc.pid)
        paced = PacedProducer(broker.bootstrap, topic, args.rate, args.seconds)
        began = time.monotonic()
        paced.start()
        paced.join()
        behind_s = wait_read(query, topic, warm.sent + paced.sent)  # how far behind the query was at the end
        wall = time.monotonic() - began
        cpu_after = cpu_seconds(broker.proc.pid)
    finally:
        stop_gracefully([query])  # between microbatches: no worker cut off mid-task
    progress = [p for p in query.recentProgress if p["batchId"] > counted_after and p["numInputRows"] > 0]
    stamps = (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).load()
              .select("partition", "offset", (F.unix_micros("timestamp") / 1000).alias("ms")).collect())
    produced_at = {(r.partition, r.offset): r.ms for r in stamps}
    latencies = []  # to the end of the batch (its commit log written), as before
    to_write = []  # to the sink's write (the batch's end less its commit-log write)
    starts = []
    for p in progress:
        begin = _offsets(p["sources"][0]["startOffset"]).get(topic, {})
        end = _offsets(p["sources"][0]["endOffset"])[topic]
        started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        starts.append(started)
        done = started + p["durationMs"]["triggerExecution"]
        written = done - p["durationMs"].get("commitOffsets", 0)
        for part, until in end.items():
            for off in range(int(begin.get(part, 0)), int(until)):
                if (int(part), off) in produced_at:
                    latencies.append(done - produced_at[(int(part), off)])
                    to_write.append(written - produced_at[(int(part), off)])

    def pct(values: list, q: float) -> float:
        values = sorted(values)
        return values[min(len(values) - 1, int(len(values) * q))]

    return {
        "trigger_s": trigger_s, "events_per_s": args.rate, "events": len(latencies), "batches": len(progress),
        "p50_ms": round(pct(latencies, 0.5)), "p99_ms": round(pct(latencies, 0.99)),
        "p50_ms_to_sink_write": round(pct(to_write, 0.5)), "p99_ms_to_sink_write": round(pct(to_write, 0.99)),
        "median_rows_per_batch": statistics.median(p["numInputRows"] for p in progress),
        "median_batch_start_interval_ms": round(statistics.median(b - a for a, b in zip(starts, starts[1:]))),
        "behind_at_end_s": round(behind_s, 2),
        # where a microbatch's time goes: median (and 90th percentile) ms of each phase of Spark's progress report
        "phase_median_ms": {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in LIVE_PHASES},
        "phase_p90_ms": {k: pct([p["durationMs"].get(k, 0) for p in progress], 0.9) for k in LIVE_PHASES},
        "cpu_s_per_s": {k: round((cpu_after[k] - cpu_before[k]) / wall, 2) for k in cpu_before},
    }


def live_runs(spark, broker, admin, args, work: str, common: dict) -> None:
    """The live queries: each --trigger in turn, --live-rounds times (the order rotated each round); a line per
    run, then per trigger the medians over the rounds and their spread."""
    import freshet.spark.source

    spark.conf.set("spark.sql.shuffle.partitions", str(args.live_shuffle_partitions))
    tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(freshet.spark.source.__file__))))
    runs: dict[float, list[dict]] = {t: [] for t in args.trigger}
    if args.session_warmup_seconds:  # the session's first query pays for the JIT compiling the engine's hot paths
        warmup = argparse.Namespace(**{**vars(args), "seconds": args.session_warmup_seconds})
        live_once(spark, broker, admin, 0.25, warmup, work)
    for round_ in range(args.live_rounds):
        order = args.trigger[round_ % len(args.trigger):] + args.trigger[:round_ % len(args.trigger)]
        for trigger_s in order:
            run = live_once(spark, broker, admin, trigger_s, args, work)
            runs[trigger_s].append(run)
            print(json.dumps({"result": "live_latency", "round": round_ + 1, "source_tree": tree,
                              "source_options": args.source_option, **run, **common}),
                  flush=True)
    for trigger_s, done in runs.items():
        print(json.dumps({"result": "live_latency_summary", "trigger_s": trigger_s, "source_tree": tree,
                          "source_options": args.source_option,
                          "runs": len(done),
                          "p50_ms_median": statistics.median(r["p50_ms"] for r in done),
                          "p99_ms_median": statistics.median(r["p99_ms"] for r in done),
                          "p50_ms": [r["p50_ms"] for r in done], "p99_ms": [r["p99_ms"] for r in done],
                          "batch_ms_median": statistics.median(r["phase_median_ms"]["triggerExecution"] for r in done),
                          **common}), flush=True)


def real_time_check(spark, broker, admin, work: str, common: dict) -> None:
    """Whether Spark's real-time mode (trigger(realTime=...), update mode) runs over the freshet source: the error
    Spark stops the query with, or that it ran. Spark checks the sink against an allowlist first (noop is not on
    it); the check is then repeated with that allowlist off (spark.sql.streaming.realTimeMode.allowlistCheck), to
    see what it says of the source."""
    topic = f"rt-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    key = "spark.sql.streaming.realTimeMode.allowlistCheck"
    for allowlist in ("true", "false"):
        spark.conf.set(key, allowlist)
        raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
               .option("subscribe", topic).load())
        error = None
        try:
            query = (raw.writeStream.outputMode("update").format("noop").trigger(realTime="5 seconds")
                     .option("checkpointLocation", os.path.join(work, f"ck-rt-{allowlist}")).start())
            query.awaitTermination(60)
            error = query.exception()
            query.stop()
        except Exception as exc:  # noqa: BLE001 - what Spark says is the result
            error = exc
        message = str(getattr(error, "desc", None) or error or "")
        print(json.dumps({"result": "real_time_mode", "sink_allowlist_check": allowlist == "true",
                          "refused": error is not None, "error": message.splitlines()[0][:400] if message else None,
                          **common}), flush=True)
    spark.conf.unset(key)


def window_once(master: str, bootstrap: str, topic: str) -> None:
    """One (b) run of the freshet source on ``master``, in this process: its JSON line."""
    from freshet.spark import session

    began = time.monotonic()
    spark = session("bench-window", master=master, shuffle_partitions=4,
                    extra={"spark.sql.streaming.numRecentProgressUpdates": "1000"})
    session_s = time.monotonic() - began
    work = tempfile.mkdtemp(prefix="freshet-bench-window-")
    try:
        raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
               .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", ROWS_PER_BATCH).load())
        query = (windowed(raw).writeStream.outputMode("update").format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", os.path.join(work, "ck")).start())
        result = measure(query)
        print(json.dumps({"engine": master, "session_start_s": round(session_s, 1), **result}), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def compare_cluster(args, common: dict) -> None:
    """(b) on local[2] and on a two-worker standalone cluster, alternating, each run a child process."""
    import subprocess
    import sys

    from freshet.local.spark_cluster import SparkCluster

    work = tempfile.mkdtemp(prefix="freshet-bench-cluster-")
    broker = BrokerProcess().start()
    try:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held: a dropped client cancels its requests
        admin.create_topics([NewTopic(topic, 6)])[topic].result(30)
        produce_all(broker.bootstrap, topic, make_values(args.events, 1_700_000_000_000), 6)
        began = time.monotonic()
        with contextlib.ExitStack() as stack:
            if args.master:  # a cluster that runs already
                master = args.master
            else:
                master = stack.enter_context(SparkCluster(os.path.join(work, "cluster"), workers=2, cores=1,
                                                          memory="2g")).master_url
                print(json.dumps({"result": "cluster_start", "workers": 2, "cores_per_worker": 1,
                                  "seconds": round(time.monotonic() - began, 1), **common}), flush=True)
            runs: dict[str, list[dict]] = {"local[2]": [], master: []}
            for round_ in range(1, args.rounds + 1):
                for engine, done in runs.items():
                    out = subprocess.run([sys.executable, __file__, "--window-once", engine, "--bootstrap",
                                          broker.bootstrap, "--topic", topic], capture_output=True, text=True,
                                         timeout=1800, check=False)
                    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
                    if out.returncode != 0 or not lines:
                        raise RuntimeError(f"the run on {engine} failed: {out.stderr[-2000:]}")
                    run = json.loads(lines[-1])
                    done.append(run)
                    print(json.dumps({"result": "parse_window_engine", "round": round_, **run, **common}), flush=True)
        local, on_cluster = (statistics.median(r["rows_per_s"] for r in rs) for rs in runs.values())
        print(json.dumps({"result": "parse_window_cluster_over_local", "ratio": round(on_cluster / local, 2),
                          "local_rows_per_s": round(local), "cluster_rows_per_s": round(on_cluster),
                          "rows_per_s_spread": {m: [r["rows_per_s"] for r in rs] for m, rs in runs.items()},
                          "session_start_s": {m: [r["session_start_s"] for r in rs] for m, rs in runs.items()},
                          **common}), flush=True)
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--trigger", type=float, action="append",
                    help="processing-time trigger interval (s) of the live query; repeated: a live query each, "
                         "taking turns (default 0.25)")
    ap.add_argument("--live-rounds", type=int, default=1, help="turns of the live queries (one per --trigger each)")
    ap.add_argument("--warmup-seconds", type=float, default=3.0,
                    help="each live query first reads this long of the paced producer's events, not counted")
    ap.add_argument("--session-warmup-seconds", type=float, default=20.0,
                    help="a live query of this long runs first, not counted (the JVM compiles the engine meanwhile)")
    ap.add_argument("--real-time", action="store_true",
                    help="first try Spark's real-time mode (trigger(realTime=...)) over the freshet source: what it says")
    ap.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of the live queries' freshet source (repeatable), e.g. readOnDriver=true")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable), e.g. an event log to profile the batches")
    ap.add_argument("--live-shuffle-partitions", type=int, default=2,
                    help="shuffle partitions of the live query (one per core here)")
    ap.add_argument("--only-live", action="store_true", help="skip the throughput runs")
    ap.add_argument("--only-read", action="store_true", help="run (a) only: no parse + window, no live run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="run each throughput query this many times, in turns; the last round counts")
    ap.add_argument("--ceiling", action="store_true",
                    help="also run (a) over ready Arrow batches from a Python data source (no reading at all) and "
                         "over confluent-kafka's consume() alone: where the limit of (a) lies")
    ap.add_argument("--compare-cluster", action="store_true",
                    help="(b) on local[2] and on a two-worker standalone cluster on this machine, alternating")
    ap.add_argument("--master", help="with --compare-cluster: a running cluster's spark://HOST:PORT instead of "
                                     "starting one")
    ap.add_argument("--window-once", metavar="MASTER", help=argparse.SUPPRESS)  # a child of --compare-cluster
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.trigger = args.trigger or [0.25]
    common = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
    if args.window_once:
        return window_once(args.window_once, args.bootstrap, args.topic)
    if args.compare_cluster or args.master:
        return compare_cluster(args, common)
    work = tempfile.mkdtemp(prefix="freshet-bench-")
    broker = BrokerProcess().start()
    try:
        from freshet.spark import session
        from freshet.spark.source import source_schema

        spark = session("bench", shuffle_partitions=4, extra={"spark.sql.streaming.numRecentProgressUpdates": "1000",
                                                              **dict(kv.split("=", 1) for kv in args.spark_conf)})
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        if args.real_time:
            real_time_check(spark, broker, admin, work, common)
        if args.only_live:  # no throughput runs: nothing to load
            live_runs(spark, broker, admin, args, work, common)
            spark.stop()
            return
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 6)])[topic].result(30)
        values = make_values(args.events, 1_700_000_000_000)
        produce_all(broker.bootstrap, topic, values, 6)
        parquet_dir = os.path.join(work, "parquet-source")
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema

        from freshet.spark.source import ROWS_PER_ARROW_BATCH

        arrow_dir = os.path.join(work, "arrow-source")
        os.makedirs(parquet_dir)
        os.makedirs(arrow_dir)
        arrow_schema = to_arrow_schema(source_schema(), timezone="UTC")
        # the same rows the freshet source yields, column for column: as Parquet files for Spark's
        # file stream, and as Arrow IPC files (in the freshet source's batch size) for --ceiling
        for i in range(0, len(values), ROWS_PER_BATCH):
            chunk = values[i:i + ROWS_PER_BATCH]
            n = len(chunk)
            table = pa.table({
                "key": pa.nulls(n, pa.binary()), "value": pa.array(chunk, pa.binary()),
                "topic": pa.array([topic] * n, pa.string()), "partition": pa.array([(i // 10_000) % 6] * n, pa.int32()),
                "offset": pa.array(range(i, i + n), pa.int64()),
                "timestamp": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * n, pa.int32()),
            })
            pq.write_table(table, os.path.join(parquet_dir, f"part-{i // ROWS_PER_BATCH:03d}.parquet"))
            if args.ceiling:
                with pa.ipc.new_file(os.path.join(arrow_dir, f"part-{i // ROWS_PER_BATCH:03d}.arrow"),
                                     arrow_schema) as out:
                    for batch in table.to_batches(max_chunksize=ROWS_PER_ARROW_BATCH):
                        out.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=arrow_schema))
        del values

        def freshet_stream():
            return (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", ROWS_PER_BATCH).load())

        def arrow_files_stream():
            return spark.readStream.format("arrow_files").option("path", arrow_dir).load()

        def consume_only_stream():
            return (spark.readStream.format("kafka_consume_only").option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", ROWS_PER_BATCH).load())

        def parquet_stream():
            return (spark.readStream.schema(source_schema()).option("maxFilesPerTrigger", 1)
                    .parquet(parquet_dir))

        # warm up both paths once (JIT, Python workers), so that neither query pays for being first
        for warm in (spark.read.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
                     .option("subscribe", topic).load(), spark.read.schema(source_schema()).parquet(parquet_dir)):
            warm.write.format("noop").mode("overwrite").save()

        results = {}
        cases = [] if args.only_live else [("read_only", lambda df: df.writeStream.format("noop")),
                                           ("parse_window", lambda df: windowed(df).writeStream.outputMode("update")
                                            .format("noop"))]
        if args.only_read:
            cases = cases[:1]
        if args.ceiling:
            spark.dataSource.register(ArrowFiles)
            spark.dataSource.register(ConsumeOnly)
            spark.readStream.format("arrow_files").option("path", arrow_dir).load().writeStream.format("noop") \
                .option("checkpointLocation", os.path.join(work, "ck-warm-arrow")).trigger(availableNow=True) \
                .start().awaitTermination()  # warm-up, as for the other two
        for case, build in cases:
            sources = [("freshet", freshet_stream), ("parquet", parquet_stream)]
            if args.ceiling and case == "read_only":
                sources += [("arrow_files", arrow_files_stream), ("kafka_consume_only", consume_only_stream)]
            # the sources take turns, round after round; the last round counts. The JVM is still
            # compiling the streaming engine's hot paths in the first (measured: the JIT compiler
            # threads took 1.9 CPU-s of the first freshet query, 0.5 of the third), and the query that
            # goes first would pay for both
            for round_ in range(1, args.rounds + 1):
                for source, make in sources:
                    ck = os.path.join(work, f"ck-{case}-{source}-{round_}")
                    cpu_before = cpu_seconds(broker.proc.pid)
                    query = build(make()).option("checkpointLocation", ck).trigger(availableNow=True).start()
                    results[(case, source)] = measure(query)
                    cpu_after = cpu_seconds(broker.proc.pid)
                    results[(case, source)]["cpu_s"] = {k: round(cpu_after[k] - cpu_before[k], 2) for k in cpu_before}
                    print(json.dumps({"result": f"{case}_{source}", "round": round_, **results[(case, source)],
                                      **common}), flush=True)
            ratio = results[(case, "freshet")]["rows_per_s"] / results[(case, "parquet")]["rows_per_s"]
            target = 0.6 if case == "read_only" else 0.8
            print(json.dumps({"result": f"{case}_ratio_freshet_over_parquet", "ratio": round(ratio, 2),
                              "target": target, **common}), flush=True)
            for source, note in (("arrow_files", "the ceiling of any Python data source: ready Arrow batches, no reading"),
                                 ("kafka_consume_only", "the ceiling of a confluent-kafka reader: consume() only")):
                if (case, source) in results:
                    ceiling = results[(case, source)]["rows_per_s"] / results[(case, "parquet")]["rows_per_s"]
                    print(json.dumps({"result": f"{case}_ratio_{source}_over_parquet", "ratio": round(ceiling, 2),
                                      "note": note, **common}), flush=True)

        if args.only_read:
            spark.stop()
            return
        live_runs(spark, broker, admin, args, work, common)
        spark.stop()
        del admin
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

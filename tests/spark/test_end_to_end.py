"""Generated access logs through the broker, the freshet source, a pipeline and the sinks, checked
against an independent computation; then the same under kill -9 of the driver."""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from itertools import islice

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.pipeline_registry import read_pipelines
from freshet.client.produce import produce_records
from freshet.gen.access_logs import AccessLogGenerator
from freshet.pipelines.runner import PipelineSpec
from freshet.testing.crash import committed_batches, kill_mid_stream
from freshet.testing.parquet import committed_rows
from freshet.testing.polling import wait_for
from freshet.testing.postgres import rows as pg_rows
from freshet.testing.topics import create_topic, read_to_end

HERE = os.path.dirname(__file__)
START_MS = int(datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc).timestamp() * 1000)
LATENESS_MS = 2 * 60 * 1000


def generate(n, seed, rate_per_s=50):
    gen = AccessLogGenerator(seed=seed, rate_per_s=rate_per_s, out_of_order=0.05, late=0.0, max_disorder_s=30,
                             start_ms=START_MS)
    return list(islice(gen.events(), n))


def load(bootstrap, topic, events, partitions=3):
    create_topic(bootstrap, topic, partitions)
    produce_records(bootstrap, topic, ((e.client_ip.encode(), e.line.encode(), e.timestamp_ms)
                                              for e in events))


def read_all(broker, topic):
    """Every record a read_committed reader sees (transaction markers take offsets too: read to the end)."""
    return read_to_end(broker.bootstrap, topic, 1)


def minute(ms):
    return datetime.fromtimestamp(ms // 60000 * 60, tz=timezone.utc).replace(tzinfo=None)


def expected_counts(events):
    return Counter(minute(e.timestamp_ms) for e in events)


def closed_windows(events, counts):
    """Windows an append-mode sink must have written: ended before the final watermark."""
    watermark = max(e.timestamp_ms for e in events) - LATENESS_MS
    return {w: c for w, c in counts.items() if (w.replace(tzinfo=timezone.utc).timestamp() + 60) * 1000 <= watermark}


# the four pipelines in one go: under a minute on 2 quiet cores, minutes on a busy machine
@pytest.mark.timeout(900)
def test_generated_logs_to_parquet_and_postgres_match_an_independent_count(engine, broker, postgres, topic_name,
                                                                          tmp_path):
    """requests-per-minute into the three sinks and unique-users, on the local session and on the cluster."""
    events = generate(12_000, seed=3)
    load(broker.bootstrap, topic_name, events)
    counts = expected_counts(events)
    out_topic = f"{topic_name}-rpm"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(out_topic, 1)])[out_topic].result(10)
    rpm_table, uu_table = f"rpm_e2e_{engine.name}", f"unique_users_e2e_{engine.name}"
    # the three sinks and unique-users in one go (on the cluster: one client process, one session)
    engine.run_all([PipelineSpec("requests-per-minute", topic_name, sink, broker.bootstrap,
                                 str(tmp_path / f"ck-{sink[:4]}"), available_now=True, pg_dsn=postgres.dsn)
                    for sink in (f"parquet:{tmp_path / 'rpm'}", f"postgres:{rpm_table}", f"topic:{out_topic}")]
                   + [PipelineSpec("unique-users", topic_name, f"postgres:{uu_table}", broker.bootstrap,
                                   str(tmp_path / "ck-uu"), available_now=True, pg_dsn=postgres.dsn)])
    rows = committed_rows(str(tmp_path / "rpm"))
    parquet = {r.window_start: r.requests for r in rows}
    assert len(parquet) == len(rows), "a window was written twice"
    assert parquet == closed_windows(events, counts)
    rows = pg_rows(postgres.dsn, f"SELECT window_start AT TIME ZONE 'UTC', requests FROM {rpm_table}")
    assert dict(rows) == dict(counts)
    # the topic holds every update of a window (update mode), each batch's once: the last one per key counts
    latest = {}
    for key, value in read_all(broker, out_topic):
        latest[json.loads(key)["window_start"]] = json.loads(value)["requests"]
    assert {datetime.fromisoformat(w).replace(tzinfo=None): n for w, n in latest.items()} == dict(counts)

    users_per_hour: dict = {}
    for e in events:
        users_per_hour.setdefault(minute(e.timestamp_ms).replace(minute=0), set()).add(e.client_ip)
    rows = pg_rows(postgres.dsn, f"SELECT window_start AT TIME ZONE 'UTC', unique_exact, unique_approx FROM {uu_table}")
    assert {w: exact for w, exact, _ in rows} == {w: len(ips) for w, ips in users_per_hour.items()}
    assert all(abs(approx - exact) <= 0.15 * exact for _, exact, approx in rows)


# a Spark driver started twice (once killed mid-stream): 20-60 s each on 2 quiet cores, minutes on a busy machine
@pytest.mark.timeout(1500)
def test_exactly_once_under_kill_9_of_the_driver(broker, postgres, topic_name, tmp_path):
    """One driver runs requests-per-minute into Parquet and PostgreSQL and copies a topic through the exactly-once
    topic sink; it is killed -9 once each query has committed two microbatches, then run to the end on the same
    checkpoints: every closed window is written once, and a read_committed reader of the copy sees each input
    record exactly once (a replayed microbatch is not written again)."""
    events = generate(12_000, seed=9)
    load(broker.bootstrap, topic_name, events)
    counts = expected_counts(events)
    source, copy = f"{topic_name}-src", f"{topic_name}-copy"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, copy, 3)
    total = 9_000
    for p in range(3):
        produce_records(broker.bootstrap, source, ((None, b"%d" % i, None) for i in range(p, total, 3)), partition=p)
    out = str(tmp_path)
    cmd = [sys.executable, os.path.join(HERE, "pipeline_driver.py"), broker.bootstrap, topic_name, out, postgres.dsn,
           source, copy]
    checkpoints = [os.path.join(out, f"ck-{name}") for name in ("parquet", "postgres", "copy")]
    assert kill_mid_stream(cmd, checkpoints, targets=(2,)) == 1
    final = subprocess.run(cmd + ["--available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]

    rows = committed_rows(os.path.join(out, "parquet"))  # through _spark_metadata, not by glob
    windows = [r.window_start for r in rows]
    assert len(windows) == len(set(windows)), "a window was written twice"
    assert {r.window_start: r.requests for r in rows} == closed_windows(events, counts), "a window is missing or wrong"
    pg = dict(pg_rows(postgres.dsn, "SELECT window_start AT TIME ZONE 'UTC', requests FROM rpm"))
    assert pg == dict(counts)

    copied = [value for _, value in read_to_end(broker.bootstrap, copy, 3, "read_committed")]
    assert len(copied) == total and sorted(copied) == sorted(b"%d" % i for i in range(total))
    # a killed attempt's open transaction is aborted (re-run or timed out): nothing is held back
    wait_for(lambda: stable_offsets_at_the_ends(broker.bootstrap, copy, 3), 120,
             "the last stable offsets to reach the high watermarks", 1.0)


def stable_offsets_at_the_ends(bootstrap: str, topic: str, partitions: int) -> bool:
    """Each partition's last stable offset (a read_committed reader's end) is its high watermark."""
    ends = {isolation: Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "log_level": 0,
                                 "isolation.level": isolation}) for isolation in ("read_committed", "read_uncommitted")}
    try:
        return all(ends["read_committed"].get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                   == ends["read_uncommitted"].get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                   for p in range(partitions))
    finally:
        for consumer in ends.values():
            consumer.close()


def test_run_says_why_a_query_failed_in_one_line_and_keeps_spark_output_in_its_log(broker, topic_name, tmp_path):
    """A failure inside the running query (here: startingOffsets naming a partition the topic does not
    have) ends `freshet run` with the source's own message, not Spark's traceback; Spark's output is
    in the log beside the checkpoint."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(10)
    checkpoint = tmp_path / "ck"
    r = subprocess.run([sys.executable, "-m", "freshet.cli.main", "run", "requests-per-minute", "--from", topic_name,
                        "--to", "console", "--available-now", "--checkpoint", str(checkpoint),
                        "--starting-offsets", json.dumps({topic_name: {"3": 0}}), "--bootstrap", broker.bootstrap],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last == (f"error: requests-per-minute failed: startingOffsets names {topic_name}-3, which this source "
                    f"does not read (more in {checkpoint}.spark.log)"), r.stderr
    assert "Traceback" not in r.stderr and "\tat " not in r.stderr and len(r.stderr.strip().splitlines()) == 3
    assert "startingOffsets names" in (tmp_path / "ck.spark.log").read_text()


# one driver JVM start on the cluster (40-60 s on 2 cores) and a worker restart
@pytest.mark.timeout(900)
def test_a_worker_killed_mid_stream_the_query_finishes_with_every_window_once(spark_cluster, broker, topic_name,
                                                                           tmp_path):
    """`freshet run --master spark://...`: the driver here, one executor on each worker. Worker 0 and its
    executor are killed -9 after two microbatches; Spark runs the lost tasks on the other executor, reloads the
    state store from the checkpoint, and the query reads to the end with every closed window written once."""
    # 4 minutes of requests, 25 a second: four microbatches of 1500, the worker killed after the second (two more
    # run without it)
    events = generate(6000, seed=21, rate_per_s=25)
    load(broker.bootstrap, topic_name, events)
    out, checkpoint = str(tmp_path / "rpm"), str(tmp_path / "ck")
    driver = subprocess.Popen(
        [sys.executable, "-m", "freshet.cli.main", "run", "requests-per-minute", "--from", topic_name,
         "--to", f"parquet:{out}", "--checkpoint", checkpoint, "--available-now", "--max-offsets-per-trigger", "1500",
         "--master", spark_cluster.master_url, "--spark-conf", "spark.cores.max=2",
         "--spark-conf", "spark.executor.cores=1", "--bootstrap", broker.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while committed_batches(checkpoint) < 2 and time.monotonic() < deadline:
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            time.sleep(0.2)
        at_kill = committed_batches(checkpoint)
        assert at_kill >= 2, "the query made no progress on the cluster"
        spark_cluster.kill_worker(0)
        _, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
        spark_cluster.restart_worker(0)
    assert driver.returncode == 0, err[-3000:]
    assert at_kill < committed_batches(checkpoint), "the worker died after the query had finished"
    assert "running requests-per-minute" in err and "2 task slots" in err, err
    rows = committed_rows(out)
    windows = [r.window_start for r in rows]
    assert len(windows) == len(set(windows)), "a window was written twice"
    assert {r.window_start: r.requests for r in rows} == closed_windows(events, expected_counts(events))
    # the dashboard's pipeline registry says where it ran and links to the application's Spark UI
    announced = read_pipelines(broker.bootstrap)["requests-per-minute-to-parquet"]
    assert announced["engine"] == spark_cluster.master_url and announced["spark_ui"].startswith("http://")
    assert os.path.isdir(os.path.join(checkpoint, "state")), "the stateful stage kept its state in the checkpoint"

"""A Spark driver running, for kill -9 tests, requests-per-minute into Parquet and PostgreSQL and a copy of a topic
through the exactly-once freshet topic sink, at once (one JVM start for the three sinks).

usage: pipeline_driver.py BOOTSTRAP TOPIC OUT_DIR PG_DSN COPY_SOURCE COPY_SINK [--available-now]

The checkpoints: OUT_DIR/ck-parquet, OUT_DIR/ck-postgres, OUT_DIR/ck-copy.
"""

import os
import sys
import time

from freshet.pipelines.runner import PipelineSpec, start
from freshet.spark import session


def source_up(query) -> bool:
    """The query has asked its source for offsets: its Python source process is up (as the demo waits for it)."""
    return query.lastProgress is not None or query.status["message"] in (
        "Waiting for data to arrive", "Waiting for next trigger", "Processing new data")


def start_copy(spark, bootstrap: str, source: str, sink: str, checkpoint: str, available_now: bool):
    reader = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    if not available_now:  # small batches until the kill; after the restart the rest in one
        reader = reader.option("maxOffsetsPerTrigger", 1500)
    rows = reader.load().select("key", "value", "partition")
    writer = (rows.writeStream.format("freshet").option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("exactlyOnce", "true").option("checkpointLocation", checkpoint).queryName("copy"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0.5 seconds")
    return writer.start()


def main() -> None:
    bootstrap, topic, out_dir, dsn, copy_source, copy_sink = sys.argv[1:7]
    available_now = "--available-now" in sys.argv
    spark = session("kill-test", shuffle_partitions=2)

    def rpm(sink: str, name: str):
        return start(spark, PipelineSpec("requests-per-minute", topic, sink, bootstrap,
                                         os.path.join(out_dir, f"ck-{name}"), trigger_seconds=0.5,
                                         available_now=available_now,
                                         # small batches until the kill; after the restart the rest in one
                                         max_offsets_per_trigger=None if available_now else 1500, pg_dsn=dsn,
                                         query_name=f"rpm-{name}"))

    starts = [lambda: rpm(f"parquet:{os.path.join(out_dir, 'parquet')}", "parquet"),
              lambda: rpm("postgres:rpm", "postgres"),
              lambda: start_copy(spark, bootstrap, copy_source, copy_sink, os.path.join(out_dir, "ck-copy"),
                                 available_now)]
    queries = []
    for begin in starts:
        # one at a time: each query's source is a Python process that must connect back to Spark within a fixed
        # 10 s, which several starting together on a busy machine miss
        queries.append(begin())
        deadline = time.monotonic() + 300
        while not source_up(queries[-1]) and queries[-1].isActive and time.monotonic() < deadline:
            time.sleep(0.1)
    print("STARTED", flush=True)
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"query {q.name} failed: {q.exception()}")


if __name__ == "__main__":
    main()

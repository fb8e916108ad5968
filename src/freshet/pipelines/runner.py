"""Wire a pipeline between the freshet source and a sink, and start it as a streaming query.

Sinks:
- ``console``                 update mode, printed each microbatch
- ``parquet:PATH``            append mode (a window is written once the watermark closes it), exactly-once
- ``postgres:TABLE``          update mode, upserted by the result's key, exactly-once (``PostgresUpsertSink``)
- ``topic:NAME``              JSON rows keyed by the result's key, exactly once for read_committed readers
                              (Kafka transactions, ``freshet.spark.sink``); updated windows are written
                              again, so a compacted topic keeps each window's latest value

Which pipelines there are, what each reads and which sinks it takes: ``catalog.CATALOG``. Pipelines
over two topics take ``--from A,B``; ``favourite-urls`` and ``timeline`` keep a view in PostgreSQL and
write only there (``postgres:TABLE``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.spark import kafka_security_options
from freshet.spark.postgres import PostgresUpsertSink
from freshet.spark.session import task_slots

from .catalog import CATALOG, Pipeline, names
from .stateful import DEFAULT_LATENESS


class PipelineError(ValueError):
    """A pipeline or sink that cannot be started as asked."""


@dataclass
class PipelineSpec:
    pipeline: str
    source_topic: str
    sink: str
    bootstrap: str
    checkpoint: str
    starting_offsets: str = "earliest"
    lateness: str = DEFAULT_LATENESS
    trigger_seconds: float = 2.0
    available_now: bool = False
    max_offsets_per_trigger: int | None = None
    pg_dsn: str | None = None
    query_name: str | None = None


def source(spark, spec: PipelineSpec, topic: str | None = None) -> DataFrame:
    # read_committed: records of aborted transactions (an event-sourced processor's batch, a transactional
    # sink's replayed batch) never reach a pipeline; on topics without transactions it changes nothing
    reader = (spark.readStream.format("freshet")
              .option("kafka.bootstrap.servers", spec.bootstrap)
              .options(**kafka_security_options())
              .option("kafka.isolation.level", "read_committed")
              .option("subscribe", topic or spec.source_topic)
              .option("startingOffsets", spec.starting_offsets))
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
    slots = task_slots(spark)
    if slots:  # a microbatch is read in as many tasks as the executors run at once (a cluster: its cores)
        reader = reader.option("maxPartitions", str(slots))
    return reader.load()


def shared_path(path: str) -> str:
    """A checkpoint or output path as every process of the query sees it: executors run in their workers'
    directories, so a relative path becomes absolute; URIs (hdfs://, s3a://, file:) stay as they are."""
    return path if re.match(r"^[a-zA-Z][\w+.-]*:", path) else os.path.abspath(path)


SINK_KINDS = ("console", "parquet", "postgres", "topic")
# what Spark's withWatermark takes, in the plain form: one or more "<number> <unit>"
LATENESS = re.compile(r"(?:interval\s+)?(?:(?:\d+\s*(?:week|day|hour|minute|millisecond|microsecond)s?"
                      r"|\d+(?:\.\d+)?\s*seconds?)\s*)+", re.IGNORECASE)


def pipeline(name: str) -> Pipeline:
    if name not in CATALOG:
        raise PipelineError(f"unknown pipeline {name!r}; choose one of {', '.join(names())}")
    return CATALOG[name]


def sink_of(spec: PipelineSpec) -> tuple[str, str]:
    """(kind, target) of ``spec.sink``; PipelineError if the sink cannot be written as given."""
    kind, _, target = spec.sink.partition(":")
    if pipeline(spec.pipeline).postgres_only:
        if kind != "postgres" or not target or not spec.pg_dsn:
            raise PipelineError(f"{spec.pipeline} writes to PostgreSQL: --to postgres:TABLE and --pg-dsn")
    elif kind not in SINK_KINDS:
        raise PipelineError(f"unknown sink {spec.sink!r}: console, parquet:PATH, postgres:TABLE or topic:NAME")
    elif kind == "parquet" and not target:
        raise PipelineError("parquet sink needs a path: parquet:/some/dir")
    elif kind == "postgres" and (not target or not spec.pg_dsn):
        raise PipelineError("postgres sink needs a table (postgres:TABLE) and a DSN (--pg-dsn)")
    elif kind == "topic" and not target:
        raise PipelineError("topic sink needs a topic: topic:NAME")
    if kind == "postgres" and "." in target:
        raise PipelineError(f"postgres:{target}: give the table without a schema; it is created in the DSN's "
                            "search_path (for another schema: options=-csearch_path=NAME in the DSN)")
    return kind, target


def input_topics(spec: PipelineSpec) -> list[str]:
    """The topics of ``--from``, one per input the pipeline reads."""
    inputs = pipeline(spec.pipeline).inputs
    if len(inputs) == 1:
        return [spec.source_topic]
    topics = [t.strip() for t in spec.source_topic.split(",") if t.strip()]
    if len(topics) != len(inputs):
        count = {2: "two", 3: "three"}.get(len(inputs), str(len(inputs)))
        raise PipelineError(f"{spec.pipeline} reads {count} topics: --from "
                            + ",".join(i.upper() for i in inputs))
    return topics


def check(spec: PipelineSpec) -> list[str]:
    """What can be known to be wrong before Spark starts (PipelineError, the message says which);
    returns the topics the pipeline reads."""
    sink_of(spec)
    if not LATENESS.fullmatch(spec.lateness.strip()):
        raise PipelineError(f"lateness must be an interval like '2 minutes' or '1 hour 30 minutes', "
                            f"got {spec.lateness!r}")
    if not spec.available_now and spec.trigger_seconds <= 0:
        raise PipelineError(f"the trigger interval must be positive, got {spec.trigger_seconds} seconds")
    if spec.max_offsets_per_trigger is not None and spec.max_offsets_per_trigger < 1:
        raise PipelineError(f"max offsets per trigger must be at least 1, got {spec.max_offsets_per_trigger}")
    if spec.starting_offsets not in ("earliest", "latest"):
        try:
            given = json.loads(spec.starting_offsets)
            if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
                raise ValueError
        except ValueError:
            raise PipelineError('starting offsets must be earliest, latest or JSON like {"topic": {"0": 42}}, '
                                f"got {spec.starting_offsets!r}") from None
    return input_topics(spec)


def _name(spec: PipelineSpec) -> str:
    return spec.query_name or f"{spec.pipeline}-to-{spec.sink.partition(':')[0]}"


def _sink_id(spec: PipelineSpec) -> str:
    """Batch ids count per checkpoint: a PostgreSQL sink records its progress under table and checkpoint,
    so another query into the same table (or a fresh checkpoint) is not taken for a replay."""
    return f"{spec.sink.partition(':')[2]}|{os.path.abspath(spec.checkpoint)}"


def start(spark, spec: PipelineSpec):
    """Start the streaming query described by ``spec``; returns the StreamingQuery."""
    check(spec)
    entry = pipeline(spec.pipeline)
    raws = [source(spark, spec, topic) for topic in input_topics(spec)]
    if entry.view is not None:
        return _start(entry.view(*raws, spec.pg_dsn, sink_of(spec)[1], _sink_id(spec), spec.lateness), spec)
    extra = {"bootstrap": spec.bootstrap} if entry.needs_bootstrap else {}
    return _write(entry.result(*raws, lateness=spec.lateness, **extra), list(entry.keys), entry.final, spec)


def _write(result: DataFrame, keys: list[str], final: bool, spec: PipelineSpec):
    # windowed aggregations re-emit corrected results (update); stateful event windows emit once (append)
    mode = "append" if final else "update"
    kind, target = sink_of(spec)
    if kind == "console":
        writer = result.writeStream.outputMode(mode).format("console").option("truncate", False)
    elif kind == "parquet":
        writer = result.writeStream.outputMode("append").format("parquet").option("path", shared_path(target))
    elif kind == "postgres":
        writer = result.writeStream.outputMode(mode).foreachBatch(
            PostgresUpsertSink(spec.pg_dsn, target, keys, _sink_id(spec)))
    else:  # topic
        rows = result.select(F.to_json(F.struct(*keys)).alias("key"), F.to_json(F.struct("*")).alias("value"))
        if mode == "append":
            writer = (rows.writeStream.outputMode(mode).format("freshet").option("exactlyOnce", "true")
                      .option("kafka.bootstrap.servers", spec.bootstrap).options(**kafka_security_options())
                      .option("topic", target))
        else:
            # a Python data source's stream writer takes append mode only (Spark: "freshet does not support
            # Update mode"); each microbatch's updated rows are written by the batch writer instead
            writer = rows.writeStream.outputMode(mode).foreachBatch(
                TopicBatchWriter(spec.bootstrap, target, _sink_id(spec)))
    return _start(writer, spec)


class TopicBatchWriter:
    """``foreachBatch``: a microbatch's rows to a topic through ``write.format("freshet")``, exactly once:
    the batch id and a query id stable across restarts (from the sink and the checkpoint) go with it, so a
    replayed batch is not written again (see ``freshet.spark.sink``)."""

    def __init__(self, bootstrap: str, topic: str, sink_id: str) -> None:
        import hashlib

        self.bootstrap = bootstrap
        self.topic = topic
        self.query_id = hashlib.sha1(sink_id.encode()).hexdigest()[:16]

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        (df.write.format("freshet").option("kafka.bootstrap.servers", self.bootstrap).option("topic", self.topic)
         .options(**kafka_security_options()).option("exactlyOnce", "true").option("batchId", str(batch_id)).option("queryId", self.query_id)
         .mode("append").save())


def _start(writer, spec: PipelineSpec):
    writer = writer.option("checkpointLocation", shared_path(spec.checkpoint)).queryName(_name(spec))
    if spec.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger_seconds} seconds")
    return writer.start()

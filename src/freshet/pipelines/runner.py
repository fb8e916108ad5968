"""Wire a pipeline between the freshet source and a sink, and start it as a streaming query.

Sinks:
- ``console``                 update mode, printed each microbatch
- ``parquet:PATH``            append mode (a window is written once the watermark closes it), exactly-once
- ``postgres:TABLE``          update mode, upserted by the result's key, exactly-once (``PostgresUpsertSink``)
- ``topic:NAME``              JSON rows keyed by the result's key (at-least-once); updated windows are
                              written again, so a compacted topic keeps each window's latest value

Join pipelines read two topics (``--from A,B``): ``click-through`` (searches, clicks; any sink),
``favourite-urls`` (activity, the CDC users topic) and ``timeline`` (tweets, follows), both
PostgreSQL only (``postgres:TABLE``): they keep a view there.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.spark.postgres import PostgresUpsertSink

from . import enrichment, joins, timeline
from .access_logs import DEFAULT_LATENESS, PIPELINES, parse


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
    reader = (spark.readStream.format("freshet")
              .option("kafka.bootstrap.servers", spec.bootstrap)
              .option("subscribe", topic or spec.source_topic)
              .option("startingOffsets", spec.starting_offsets))
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
    return reader.load()


def _two_topics(spec: PipelineSpec, first: str, second: str) -> tuple[str, str]:
    topics = [t.strip() for t in spec.source_topic.split(",") if t.strip()]
    if len(topics) != 2:
        raise PipelineError(f"{spec.pipeline} reads two topics: --from {first.upper()},{second.upper()}")
    return topics[0], topics[1]


def _postgres_table(spec: PipelineSpec) -> str:
    kind, _, table = spec.sink.partition(":")
    if kind != "postgres" or not table or not spec.pg_dsn:
        raise PipelineError(f"{spec.pipeline} writes to PostgreSQL: --to postgres:TABLE and --pg-dsn")
    return table


def _click_through(spark, spec: PipelineSpec):
    searches, clicks = _two_topics(spec, "searches", "clicks")
    result = joins.click_through(joins.parse_json(source(spark, spec, searches), joins.SEARCH_SCHEMA, "search_time"),
                                 joins.parse_json(source(spark, spec, clicks), joins.CLICK_SCHEMA, "click_time"),
                                 spec.lateness)
    return _write(result, ["window_start", "query"], True, spec)


def _favourite_urls(spark, spec: PipelineSpec):
    activity, users = _two_topics(spec, "activity", "users")
    return _start(enrichment.writer(source(spark, spec, activity), source(spark, spec, users), spec.pg_dsn,
                                    _postgres_table(spec), lateness=spec.lateness, sink_id=_sink_id(spec)), spec)


def _timeline(spark, spec: PipelineSpec):
    tweets, follows = _two_topics(spec, "tweets", "follows")
    return _start(timeline.writer(source(spark, spec, tweets), source(spark, spec, follows), spec.pg_dsn,
                                  _postgres_table(spec), sink_id=_sink_id(spec)), spec)


# pipelines over two topics: --from A,B
JOIN_PIPELINES = {"click-through": _click_through, "favourite-urls": _favourite_urls, "timeline": _timeline}
# join pipelines that keep a view in PostgreSQL: --to postgres:TABLE only
POSTGRES_PIPELINES = ("favourite-urls", "timeline")
JOIN_TOPICS = {"click-through": ("searches", "clicks"), "favourite-urls": ("activity", "users"),
               "timeline": ("tweets", "follows")}
SINK_KINDS = ("console", "parquet", "postgres", "topic")
# what Spark's withWatermark takes, in the plain form: one or more "<number> <unit>"
LATENESS = re.compile(r"(?:interval\s+)?(?:(?:\d+\s*(?:week|day|hour|minute|millisecond|microsecond)s?"
                      r"|\d+(?:\.\d+)?\s*seconds?)\s*)+", re.IGNORECASE)


def check(spec: PipelineSpec) -> list[str]:
    """What can be known to be wrong before Spark starts (PipelineError, the message says which);
    returns the topics the pipeline reads."""
    if spec.pipeline not in PIPELINES and spec.pipeline not in JOIN_PIPELINES:
        raise PipelineError(f"unknown pipeline {spec.pipeline!r}; choose one of {', '.join(pipeline_names())}")
    kind, _, target = spec.sink.partition(":")
    if spec.pipeline in POSTGRES_PIPELINES:
        _postgres_table(spec)
    elif kind not in SINK_KINDS:
        raise PipelineError(f"unknown sink {spec.sink!r}: console, parquet:PATH, postgres:TABLE or topic:NAME")
    elif kind == "parquet" and not target:
        raise PipelineError("parquet sink needs a path: parquet:/some/dir")
    elif kind == "postgres" and (not target or not spec.pg_dsn):
        raise PipelineError("postgres sink needs a table (postgres:TABLE) and a DSN (--pg-dsn)")
    elif kind == "topic" and not target:
        raise PipelineError("topic sink needs a topic: topic:NAME")
    if (spec.pipeline in POSTGRES_PIPELINES or kind == "postgres") and "." in target:
        raise PipelineError(f"postgres:{target}: give the table without a schema; it is created in the DSN's "
                            "search_path (for another schema: options=-csearch_path=NAME in the DSN)")
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
    if spec.pipeline in JOIN_PIPELINES:
        return list(_two_topics(spec, *JOIN_TOPICS[spec.pipeline]))
    return [spec.source_topic]


def pipeline_names() -> list[str]:
    return sorted([*PIPELINES, *JOIN_PIPELINES])


def result_of(raw: DataFrame, spec: PipelineSpec) -> tuple[DataFrame, list[str], bool]:
    if spec.pipeline not in PIPELINES:
        raise PipelineError(f"unknown pipeline {spec.pipeline!r}; choose one of {', '.join(pipeline_names())}")
    fn, keys, final = PIPELINES[spec.pipeline]
    return fn(parse(raw), lateness=spec.lateness), keys, final


def _name(spec: PipelineSpec) -> str:
    return spec.query_name or f"{spec.pipeline}-to-{spec.sink.partition(':')[0]}"


def _sink_id(spec: PipelineSpec) -> str:
    """Batch ids count per checkpoint: a PostgreSQL sink records its progress under table and checkpoint,
    so another query into the same table (or a fresh checkpoint) is not taken for a replay."""
    return f"{spec.sink.partition(':')[2]}|{os.path.abspath(spec.checkpoint)}"


def start(spark, spec: PipelineSpec):
    """Start the streaming query described by ``spec``; returns the StreamingQuery."""
    if spec.pipeline in JOIN_PIPELINES:
        return JOIN_PIPELINES[spec.pipeline](spark, spec)
    result, keys, final = result_of(source(spark, spec), spec)
    return _write(result, keys, final, spec)


def _write(result: DataFrame, keys: list[str], final: bool, spec: PipelineSpec):
    # windowed aggregations re-emit corrected results (update); stateful event windows emit once (append)
    mode = "append" if final else "update"
    kind, _, target = spec.sink.partition(":")
    if kind == "console":
        writer = result.writeStream.outputMode(mode).format("console").option("truncate", False)
    elif kind == "parquet":
        if not target:
            raise PipelineError("parquet sink needs a path: parquet:/some/dir")
        writer = result.writeStream.outputMode("append").format("parquet").option("path", target)
    elif kind == "postgres":
        if not target or not spec.pg_dsn:
            raise PipelineError("postgres sink needs a table (postgres:TABLE) and a DSN (--pg-dsn)")
        writer = result.writeStream.outputMode(mode).foreachBatch(
            PostgresUpsertSink(spec.pg_dsn, target, keys, _sink_id(spec)))
    elif kind == "topic":
        if not target:
            raise PipelineError("topic sink needs a topic: topic:NAME")
        rows = result.select(F.to_json(F.struct(*keys)).alias("key"), F.to_json(F.struct("*")).alias("value"))
        if mode == "append":
            writer = (rows.writeStream.outputMode(mode).format("freshet")
                      .option("kafka.bootstrap.servers", spec.bootstrap).option("topic", target))
        else:
            # a Python data source's stream writer takes append mode only (Spark: "freshet does not support
            # Update mode"); each microbatch's updated rows are written by the batch writer instead
            writer = rows.writeStream.outputMode(mode).foreachBatch(TopicBatchWriter(spec.bootstrap, target))
    else:
        raise PipelineError(f"unknown sink {spec.sink!r}: console, parquet:PATH, postgres:TABLE or topic:NAME")
    return _start(writer, spec)


class TopicBatchWriter:
    """``foreachBatch``: a microbatch's rows to a topic through ``write.format("freshet")`` (at-least-once)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        (df.write.format("freshet").option("kafka.bootstrap.servers", self.bootstrap).option("topic", self.topic)
         .mode("append").save())


def _start(writer, spec: PipelineSpec):
    writer = writer.option("checkpointLocation", spec.checkpoint).queryName(_name(spec))
    if spec.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger_seconds} seconds")
    return writer.start()

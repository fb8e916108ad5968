"""Wire a pipeline between the freshet source and a sink, and start it as a streaming query.

Sinks:
- ``console``                 update mode, printed each microbatch
- ``parquet:PATH``            append mode (a window is written once the watermark closes it), exactly-once
- ``postgres:TABLE``          update mode, upserted by the result's key, exactly-once (``PostgresUpsertSink``)
- ``topic:NAME``              update mode, JSON rows keyed by the result's key (at-least-once)
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.spark.postgres import PostgresUpsertSink

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


def source(spark, spec: PipelineSpec) -> DataFrame:
    reader = (spark.readStream.format("freshet")
              .option("kafka.bootstrap.servers", spec.bootstrap)
              .option("subscribe", spec.source_topic)
              .option("startingOffsets", spec.starting_offsets))
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
    return reader.load()


def result_of(raw: DataFrame, spec: PipelineSpec) -> tuple[DataFrame, list[str], bool]:
    if spec.pipeline not in PIPELINES:
        raise PipelineError(f"unknown pipeline {spec.pipeline!r}; choose one of {', '.join(sorted(PIPELINES))}")
    fn, keys, final = PIPELINES[spec.pipeline]
    return fn(parse(raw), lateness=spec.lateness), keys, final


def start(spark, spec: PipelineSpec):
    """Start the streaming query described by ``spec``; returns the StreamingQuery."""
    result, keys, final = result_of(source(spark, spec), spec)
    # windowed aggregations re-emit corrected results (update); stateful event windows emit once (append)
    mode = "append" if final else "update"
    kind, _, target = spec.sink.partition(":")
    name = spec.query_name or f"{spec.pipeline}-to-{kind}".replace(":", "-")
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
            PostgresUpsertSink(spec.pg_dsn, target, keys, name))
    elif kind == "topic":
        if not target:
            raise PipelineError("topic sink needs a topic: topic:NAME")
        rows = result.select(F.to_json(F.struct(*keys)).alias("key"), F.to_json(F.struct("*")).alias("value"))
        writer = (rows.writeStream.outputMode(mode).format("freshet")
                  .option("kafka.bootstrap.servers", spec.bootstrap).option("topic", target))
    else:
        raise PipelineError(f"unknown sink {spec.sink!r}: console, parquet:PATH, postgres:TABLE or topic:NAME")
    writer = writer.option("checkpointLocation", spec.checkpoint).queryName(name)
    if spec.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger_seconds} seconds")
    return writer.start()

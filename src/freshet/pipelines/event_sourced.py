"""Projections of an event-sourced application's events topic as Spark pipelines.

``events`` parses the stored envelope (``{"type", "schema", "stream", "version", "data"}``, see
``freshet.eventsourcing.events``) into columns; the event's fields stay one JSON text column (``data``),
read with ``get_json_object``. Personal fields stay sealed there (``{"key", "nonce", "ct"}``): a Spark
projection never holds the keys, so it never sees personal data, and forgetting a subject needs nothing
of it. The runner reads with ``isolation.level=read_committed``, so events of an aborted batch never
count. Old schemas are not upcast here (that needs the application's Python codec): a projection reads
the fields every schema of its events has, or handles each schema.

``course_enrollment`` is the enrollment example's read model done this way: per course, its title,
capacity, students enrolled now, refusals and the version it reflects — the same numbers as the
``roster`` projection, maintained by Spark (update mode, upserted exactly once into PostgreSQL).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ENVELOPE = "type STRING, schema INT, stream STRING, version LONG, data STRING"


def events(raw: DataFrame) -> DataFrame:
    """One row per stored event: aggregate type and id, version, event type and schema, its fields as JSON
    text, and its place in the log."""
    parsed = raw.where(F.col("value").isNotNull()).select(
        F.from_json(F.col("value").cast("string"), ENVELOPE).alias("e"), "partition", "offset", "timestamp")
    return parsed.select(
        F.split(F.col("e.stream"), "/", 2).getItem(0).alias("aggregate"),
        F.split(F.col("e.stream"), "/", 2).getItem(1).alias("aggregate_id"),
        F.col("e.stream").alias("stream"), F.col("e.version").alias("version"),
        F.col("e.type").alias("event_type"), F.col("e.schema").alias("schema"), F.col("e.data").alias("data"),
        "partition", "offset", F.col("timestamp").alias("recorded_at"),
    ).where(F.col("event_type").isNotNull())


def field(name: str, cast: str = "string"):
    """One field of the events' data."""
    return F.get_json_object(F.col("data"), f"$.{name}").cast(cast)


def course_enrollment(events_df: DataFrame) -> DataFrame:
    courses = events_df.where(F.col("aggregate") == "course")
    kind = F.col("event_type")
    return courses.groupBy(F.col("aggregate_id").alias("course")).agg(
        F.max(F.when(kind == "CourseOpened", field("title"))).alias("title"),
        F.max(F.when(kind == "CourseOpened", field("capacity", "int"))).alias("capacity"),
        F.sum(F.when(kind == "StudentEnrolled", 1).when(kind == "EnrollmentCancelled", -1).otherwise(0))
        .cast("int").alias("enrolled"),
        F.sum(F.when(kind == "EnrollmentRefused", 1).otherwise(0)).cast("int").alias("refused"),
        F.max("version").alias("version"),
    )

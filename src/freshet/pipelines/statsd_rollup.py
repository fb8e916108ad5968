"""StatsD's flush, as a Spark pipeline: the metrics topic that ``freshet ingest serve --statsd`` fills, rolled
up per 10-second window (StatsD's default flush interval), per metric name, type and tags.

What each type reports, as StatsD does:

- counter: ``value`` the sum of the increments, each scaled up by its sample rate (``1|c|@0.1`` counts 10),
  and ``rate`` that sum per second;
- gauge: ``value`` what the gauge holds at the window's end: values set and ``+n``/``-n`` changes applied in
  order (event time, then offset), starting from 0 (a window's first change is not added to the window
  before: windows are independent, so a late window never rewrites a later one);
- timer, histogram, distribution: ``samples``, ``min``, ``max``, ``mean`` (also ``value``), ``p50``, ``p90``,
  ``p99`` (approximate percentiles);
- set: ``value`` the number of distinct members (HyperLogLog).

A pure function of DataFrames: the same on a static DataFrame and on the stream.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

FLUSH_INTERVAL = "10 seconds"
METRIC_SCHEMA = T.StructType([
    T.StructField("name", T.StringType()), T.StructField("type", T.StringType()),
    T.StructField("value", T.DoubleType()), T.StructField("member", T.StringType()),
    T.StructField("delta", T.BooleanType()), T.StructField("sample_rate", T.DoubleType()),
    T.StructField("tags", T.MapType(T.StringType(), T.StringType())), T.StructField("received_ms", T.LongType()),
])
SECONDS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60}


def parse(raw: DataFrame) -> DataFrame:
    """Records of the metrics topic -> one row per metric sample, ``event_time`` when it was received."""
    m = F.from_json(F.col("value").cast("string"), METRIC_SCHEMA)
    order = F.col("offset") if "offset" in raw.columns else F.lit(0).cast("long")
    parsed = raw.select(m.alias("m"), order.alias("offset")).select("m.*", "offset")
    return (parsed.where(F.col("name").isNotNull() & F.col("type").isNotNull())
            .withColumn("event_time", F.timestamp_millis("received_ms"))
            # tags as one sorted JSON text, so {a,b} and {b,a} are the same series
            .withColumn("tags", F.to_json(F.map_from_entries(F.array_sort(F.map_entries(
                F.coalesce("tags", F.create_map().cast("map<string,string>"))))))))


def rollup(metrics: DataFrame, interval: str = FLUSH_INTERVAL, lateness: str = FLUSH_INTERVAL) -> DataFrame:
    """One row per (window, name, type, tags): see the module's docstring for what each type reports."""
    number, unit = interval.split()
    seconds = float(number) * SECONDS[unit]
    grouped = (metrics.withWatermark("event_time", lateness)
               .groupBy(F.window("event_time", interval).alias("window"), "name", "type", "tags")
               .agg(F.count(F.lit(1)).alias("samples"),
                    F.sum(F.col("value") / F.coalesce(F.col("sample_rate"), F.lit(1.0))).alias("scaled_sum"),
                    F.collect_list(F.when(F.col("type") == "gauge", F.struct(
                        "event_time", "offset", "value", F.coalesce("delta", F.lit(False)).alias("delta")))
                    ).alias("gauge"),
                    F.min("value").alias("min"), F.max("value").alias("max"), F.avg("value").alias("mean"),
                    F.percentile_approx("value", [0.5, 0.9, 0.99], 1000).alias("pct"),
                    F.approx_count_distinct("member").alias("members")))
    kind = F.col("type")
    timing = kind.isin("timer", "histogram", "distribution")
    value = (F.when(kind == "counter", F.col("scaled_sum"))
             .when(kind == "gauge", F.expr("aggregate(array_sort(gauge), CAST(0 AS DOUBLE),"
                                          " (held, g) -> IF(g.delta, held + g.value, g.value))"))
             .when(timing, F.col("mean"))
             .when(kind == "set", F.col("members").cast("double")))
    return grouped.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "name", "type", "tags", "samples", value.alias("value"),
        F.when(kind == "counter", F.col("scaled_sum") / seconds).alias("rate"),
        *[F.when(timing, F.col(c)).alias(c) for c in ("min", "max", "mean")],
        *[F.when(timing, F.col("pct")[i]).alias(name) for i, name in enumerate(("p50", "p90", "p99"))])

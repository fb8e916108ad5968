"""Pipelines over web access logs (Apache combined format). Each is a pure function of DataFrames:
it works the same on a static DataFrame (tests) and on a stream from ``format("freshet")``.

Event time is the time written in the log line, not when the record reached the broker. Every
windowed aggregation declares a watermark: events later than ``lateness`` behind the largest
event time seen are dropped by Spark and counted in the query's progress
(``numRowsDroppedByWatermark``, see ``freshet.spark.progress``); within the lateness a window's
result is corrected and emitted again (update mode, upsert sinks).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .stateful import DEFAULT_LATENESS, epoch_ms, stateful

COMBINED = r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+)[^"]*" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"'
TIME_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"


def parse(raw: DataFrame) -> DataFrame:
    """Records (``value`` holding one log line) -> one row per well-formed request.

    Lines that do not parse are dropped (count them with ``raw.count() - parse(raw).count()``).
    The record's ``partition`` and ``offset``, when the records have them (the source's do), are
    kept: they name each event (results per event are keyed by them).
    """
    line = F.col("value").cast("string")

    def group(i: int):
        return F.regexp_extract(line, COMBINED, i)

    parsed = raw.select(
        group(1).alias("client_ip"),
        F.to_timestamp(group(2), TIME_FORMAT).alias("event_time"),
        group(3).alias("method"),
        group(4).alias("path"),
        group(5).cast("int").alias("status"),
        F.when(group(6) == "-", F.lit(0)).otherwise(group(6)).cast("long").alias("size"),
        group(7).alias("referrer"),
        group(8).alias("user_agent"),
        *[c for c in ("partition", "offset") if c in raw.columns],
    )
    return parsed.where((F.col("client_ip") != "") & F.col("event_time").isNotNull())


def _windowed(events: DataFrame, lateness: str, duration: str, slide: str | None = None, *keys: str):
    w = F.window("event_time", duration, slide) if slide else F.window("event_time", duration)
    return events.withWatermark("event_time", lateness).groupBy(w.alias("window"), *keys)


def _flatten(df: DataFrame) -> DataFrame:
    return df.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                     *[c for c in df.columns if c != "window"])


def requests_per_minute(events: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """Tumbling 1-minute windows: requests, bytes, server errors."""
    return _flatten(_windowed(events, lateness, "1 minute").agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum("size").alias("bytes"),
        F.sum(F.when(F.col("status") >= 500, 1).otherwise(0)).alias("server_errors"),
    ))


def hopping_average(events: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """5-minute windows refreshed every minute: average requests per minute and response size."""
    return _flatten(_windowed(events, lateness, "5 minutes", "1 minute").agg(
        (F.count(F.lit(1)) / F.lit(5.0)).alias("avg_requests_per_minute"),
        F.avg("size").alias("avg_size"),
    ))


def size_percentiles(events: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """p50 and p99 response size per 5-minute window (approximate percentiles, accuracy 10000)."""
    return _flatten(_windowed(events, lateness, "5 minutes").agg(
        F.percentile_approx("size", 0.5, 10000).alias("p50_size"),
        F.percentile_approx("size", 0.99, 10000).alias("p99_size"),
        F.count(F.lit(1)).alias("requests"),
    ))


def unique_users_per_hour(events: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """Distinct client IPs per hour, exact (a set in state) and approximate (HyperLogLog++, rsd 5%)."""
    return _flatten(_windowed(events, lateness, "1 hour").agg(
        F.size(F.collect_set("client_ip")).alias("unique_exact"),
        F.approx_count_distinct("client_ip", 0.05).alias("unique_approx"),
    )).withColumn("approx_error", F.col("unique_approx") - F.col("unique_exact"))


def sessions(events: DataFrame, gap: str = "30 minutes", lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """Sessions per client: requests separated by less than ``gap`` of inactivity."""
    grouped = events.withWatermark("event_time", lateness).groupBy(
        F.session_window("event_time", gap).alias("session"), "client_ip")
    return grouped.agg(F.count(F.lit(1)).alias("requests"), F.collect_set("path").alias("paths")).select(
        "client_ip",
        F.col("session.start").alias("session_start"),
        F.col("session.end").alias("session_end"),
        "requests",
        F.size("paths").alias("distinct_paths"),
    )


SPIKE = 3.0  # a window above 3x the one before is a spike, below 1/3 of it a drop


def trend_flag(ratio: float | None) -> str | None:
    """'spike', 'drop' or None for a window's ratio to the one before (None: no window before)."""
    if ratio is None:
        return None
    return "spike" if ratio > SPIKE else "drop" if ratio < 1 / SPIKE else None


def trend(counts: DataFrame, value: str = "requests", order: str = "window_start") -> DataFrame:
    """Each window beside the one before it; ``flag`` (``trend_flag``) is 'spike' above 3x, 'drop' below 1/3.

    A batch function (window functions over the whole table): run it on the materialized result
    of ``requests_per_minute`` (a static DataFrame or the PostgreSQL table); on a stream, use
    ``requests_trend``.
    """
    w = Window.orderBy(order)
    previous = F.lag(value).over(w)
    ratio = F.when(previous > 0, F.col(value) / previous)
    return counts.withColumn("previous", previous).withColumn("ratio", ratio).withColumn(
        "flag",
        F.when(F.col("ratio") > SPIKE, F.lit("spike")).when(F.col("ratio") < 1 / SPIKE, F.lit("drop"))
        .otherwise(F.lit(None)),
    )


TREND_OUTPUT = ("window_start timestamp, window_end timestamp, requests long, previous long, ratio double, "
                "flag string")
TREND_STATE = "open binary, last_requests long"  # open minutes and their counts (packed int64 pairs)


def requests_trend(events: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """Requests per minute, each window beside the one before it (``trend``) — on a stream too.

    Spark allows no stateful operator after a streaming aggregation, and ``lag`` needs the whole
    table, so on a stream the minutes are counted in Python stateful processing (one group: the
    series) and each is written once the watermark passes its end, beside the previous window that
    had requests. Events behind the watermark are dropped and counted, as by the other pipelines.
    """
    if not events.isStreaming:
        return trend(requests_per_minute(events, lateness).select("window_start", "window_end", "requests"))

    import numpy as np
    import pandas as pd

    minute_ms = 60_000

    def step(_key: tuple, batches, state):
        held = np.frombuffer(state.get[0], "<i8").reshape(-1, 2) if state.exists else np.empty((0, 2), "<i8")
        last = state.get[1] if state.exists else None
        counts = dict(zip(held[:, 0].tolist(), held[:, 1].tolist()))
        for batch in batches:
            for start, n in (epoch_ms(batch["event_time"]) // minute_ms * minute_ms).value_counts().items():
                counts[int(start)] = counts.get(int(start), 0) + int(n)
        watermark = state.getCurrentWatermarkMs()
        out = []
        for start in sorted(w for w in counts if w + minute_ms <= watermark):  # closed: written once
            requests = counts.pop(start)
            ratio = requests / last if last else None
            out.append((start, start + minute_ms, requests, last, ratio, trend_flag(ratio)))
            last = requests
        pairs = np.array(sorted(counts.items()), dtype="<i8").reshape(-1, 2)
        state.update((pairs.tobytes(), last))
        if counts:  # be called when the watermark passes the oldest open minute, even with no new events
            state.setTimeoutTimestamp(min(counts) + minute_ms)
        if out:
            df = pd.DataFrame(out, columns=["start", "end", "requests", "previous", "ratio", "flag"])
            df["window_start"] = pd.to_datetime(df.pop("start"), unit="ms")
            df["window_end"] = pd.to_datetime(df.pop("end"), unit="ms")
            df["previous"] = df["previous"].astype("Int64")
            yield df[["window_start", "window_end", "requests", "previous", "ratio", "flag"]]

    series = events.select("event_time").withColumn("series", F.lit(0))
    return stateful(series, "series", step, TREND_OUTPUT, TREND_STATE, lateness)

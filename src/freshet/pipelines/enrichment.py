"""Stream-table join: user activity enriched with the user's profile as of the event.

The ``users`` table arrives as its CDC changelog (Debezium envelopes from ``freshet cdc postgres``).
A local copy of the table lives in Spark state, keyed by user id (``transformWithStateInPandas``,
RocksDB state store, checkpointed): each key keeps the versions of its profile with the commit time
each became valid. An activity event waits in state until the watermark passes its event time; by
then every profile change committed before it has arrived, so it is joined with the profile that
was valid *at the event*, whatever order the two streams arrived in. Replaying gives the same result.
Versions the watermark has left behind are pruned, so state stays one profile per user plus what is
still in flight.

Downstream, ``favourite_urls`` counts visits per age group and URL; streaming, the counts go into
PostgreSQL (``PostgresUpsertSink`` with ``add_columns``) and a view picks each group's favourite.
A profile change moves the user's later activity to the new age group.
"""

from __future__ import annotations

import json
from typing import Iterator

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

ACTIVITY_SCHEMA = "user_id long, url string, ts long"
ENRICHED_SCHEMA = "user_id long, url string, event_time timestamp, age int, age_group string"
AGE_GROUPS = ((0, 18, "under 18"), (18, 25, "18-24"), (25, 35, "25-34"), (35, 50, "35-49"), (50, 65, "50-64"),
              (65, 200, "65+"))
UNKNOWN = "unknown"
EVER = -(2 ** 62)  # a snapshot row's validity reaches back to before any event


def age_group(age) -> str:
    if age is None or pd.isna(age):
        return UNKNOWN
    for low, high, name in AGE_GROUPS:
        if low <= age < high:
            return name
    return UNKNOWN


def activity(raw: DataFrame) -> DataFrame:
    """Activity events: JSON {user_id, url, ts (epoch ms)} in the record value."""
    e = raw.select(F.from_json(F.col("value").cast("string"), ACTIVITY_SCHEMA).alias("e")).select("e.*")
    return e.where(F.col("user_id").isNotNull() & F.col("ts").isNotNull())


def profile_changes(raw: DataFrame) -> DataFrame:
    """Debezium change events of ``users(id, age, ...)``: user_id, valid_from (ms), age, deleted, emitted_at.

    A snapshot row (op "r") is valid from ever; a change from its commit time (``source.ts_ms``).
    ``emitted_at`` (the envelope's ``ts_ms``, when the connector produced it) is the change's time for
    the watermark: a change emitted more than the lateness behind the activity is dropped as late.
    Tombstones (null values, for compaction) carry nothing and are skipped.
    """
    schema = ("op string, ts_ms long, before struct<id long, age int>, after struct<id long, age int>, "
              "source struct<ts_ms long, snapshot string>")
    e = raw.where(F.col("value").isNotNull()).select(
        F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
    return e.where(F.col("op").isin("r", "c", "u", "d")).select(
        F.coalesce("after.id", "before.id").alias("user_id"),
        F.when(F.col("op") == "r", F.lit(EVER)).otherwise(F.col("source.ts_ms")).alias("valid_from"),
        F.col("after.age").alias("age"),
        (F.col("op") == "d").alias("deleted"),
        F.coalesce("ts_ms", "source.ts_ms").alias("emitted_at"))


def _unified(events: DataFrame, profiles: DataFrame) -> DataFrame:
    a = events.select("user_id", F.col("ts").alias("time_ms"), F.timestamp_millis("ts").alias("event_time"),
                      F.lit("activity").alias("kind"), "url", F.lit(None).cast("int").alias("age"),
                      F.lit(False).alias("deleted"))
    p = profiles.select("user_id", F.col("valid_from").alias("time_ms"),
                        F.timestamp_millis("emitted_at").alias("event_time"), F.lit("profile").alias("kind"),
                        F.lit(None).cast("string").alias("url"), "age", "deleted")
    return a.unionByName(p)


class ProfileJoin(StatefulProcessor):
    """Per user: profile versions and activity waiting for the watermark; emits enriched activity.

    Streaming, an event is emitted by its event-time timer; in a batch query (no timers, everything
    has arrived) at once.
    """

    def __init__(self, streaming: bool = True) -> None:
        self.streaming = streaming

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.versions = handle.getListState("versions", "valid_from long, age int, deleted boolean")
        self.waiting = handle.getListState("waiting", "time_ms long, url string")

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
        versions = list(self.versions.get()) if self.versions.exists() else []
        waiting = list(self.waiting.get()) if self.waiting.exists() else []
        for pdf in rows:
            profile = pdf[pdf["kind"] == "profile"]
            versions += [(int(t), None if pd.isna(a) else int(a), bool(d))
                         for t, a, d in zip(profile["time_ms"], profile["age"], profile["deleted"])]
            act = pdf[pdf["kind"] == "activity"]
            for t, url in zip(act["time_ms"], act["url"]):
                waiting.append((int(t), url))
                if self.streaming:
                    self.handle.registerTimer(int(t))  # fires once the watermark passes the event
        versions.sort(key=lambda v: v[0])
        _put(self.versions, versions)
        _put(self.waiting, waiting)
        if not self.streaming:
            yield from self._emit(key[0], 2 ** 62)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield from self._emit(key[0], expiredTimerInfo.getExpiryTimeInMs())

    def _emit(self, user_id, up_to: int) -> Iterator[pd.DataFrame]:
        versions = list(self.versions.get()) if self.versions.exists() else []
        waiting = list(self.waiting.get()) if self.waiting.exists() else []
        ready = sorted(w for w in waiting if w[0] <= up_to)
        if not ready:
            return
        rest = [w for w in waiting if w[0] > up_to]
        rows = []
        for t, url in ready:
            age = None
            for valid_from, v_age, deleted in versions:  # the last version valid at t
                if valid_from > t:
                    break
                age = None if deleted else v_age
            rows.append((user_id, url, pd.Timestamp(t, unit="ms"), age, age_group(age)))
            if self.streaming:
                self.handle.deleteTimer(t)
        _put(self.waiting, rest)
        # versions wholly before what can still arrive are no longer needed: keep the one valid then
        keep_from = max((i for i, v in enumerate(versions) if v[0] <= up_to), default=0)
        if keep_from:
            self.versions.put(versions[keep_from:])
        yield pd.DataFrame(rows, columns=["user_id", "url", "event_time", "age", "age_group"]).astype(
            {"user_id": "int64", "age": "Int32"})

    def close(self) -> None:
        pass


def _put(state, values: list) -> None:
    """ListState refuses an empty list: clear it instead."""
    if values:
        state.put(values)
    else:
        state.clear()


def enrich(events: DataFrame, profiles: DataFrame, lateness: str = "1 minute") -> DataFrame:
    """Activity events joined with the profile valid at each event's time (see the module doc)."""
    both = _unified(events, profiles)
    if both.isStreaming:
        both = both.withWatermark("event_time", lateness)
    grouped = both.groupBy("user_id")
    return grouped.transformWithStateInPandas(ProfileJoin(both.isStreaming), ENRICHED_SCHEMA, "append",
                                              "EventTime" if both.isStreaming else "None")


def visits_per_age_group(enriched: DataFrame) -> DataFrame:
    return enriched.groupBy("age_group", "url").agg(F.count(F.lit(1)).alias("visits"))


def favourite_urls(enriched: DataFrame) -> DataFrame:
    """Static: each age group's most visited URL (ties: the smaller URL)."""
    counts = visits_per_age_group(enriched)
    rank = F.row_number().over(Window.partitionBy("age_group").orderBy(F.desc("visits"), "url"))
    return counts.withColumn("rank", rank).where("rank = 1").drop("rank")


FAVOURITE_VIEW_SQL = """
CREATE OR REPLACE VIEW {view} AS
SELECT DISTINCT ON (age_group) age_group, url, visits
FROM {table} ORDER BY age_group, visits DESC, url
"""


def profile_envelope(user_id: int, age: int | None, op: str, commit_ms: int, emitted_ms: int | None = None) -> bytes:
    """A Debezium-shaped change of ``users`` (what ``freshet cdc postgres`` produces), for tests and demos."""
    row = None if age is None and op == "d" else {"id": user_id, "age": age}
    return json.dumps({"op": op, "ts_ms": commit_ms if emitted_ms is None else emitted_ms,
                       "before": {"id": user_id, "age": None} if op == "d" else None,
                       "after": None if op == "d" else row,
                       "source": {"ts_ms": commit_ms, "snapshot": "true" if op == "r" else "false"}}).encode()


def writer(activity_raw: DataFrame, users_raw: DataFrame, dsn: str, table: str = "visits_by_age_group",
           view: str | None = None, lateness: str = "1 minute", sink_id: str = "favourite-urls"):
    """Stream: activity x users changelog -> visit counts per (age group, URL) in PostgreSQL, and a view
    (``view``, default TABLE_favourite) with each group's favourite URL. Exactly-once: the counts are
    added in the transaction that records the batch id."""
    from freshet.client.postgres import connection, quote_ident
    from freshet.spark.postgres import PostgresUpsertSink

    enriched = enrich(activity(activity_raw), profile_changes(users_raw), lateness)
    sink = PostgresUpsertSink(dsn, table, ["age_group", "url"], sink_id, add_columns=["visits"],
                              transform=visits_per_age_group)
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {quote_ident(table)} "
                    "(age_group text, url text, visits bigint NOT NULL, PRIMARY KEY (age_group, url))")
        cur.execute(FAVOURITE_VIEW_SQL.format(view=quote_ident(view or f"{table}_favourite"), table=quote_ident(table)))
    return enriched.writeStream.outputMode("append").foreachBatch(sink)

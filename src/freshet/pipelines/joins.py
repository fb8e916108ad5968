"""Joins on streams: window join (click-through), self-join, and a time-dependent (as-of) join.

- ``click_through``: searches joined to the click they led to within one hour (watermarks on both
  sides, a time-range condition); a search with no click by then counts as a non-click (left outer
  join, emitted once the watermark closes the hour). Counted per query per hour.
- ``repeat_actions``: two actions of the same user within 30 minutes (a stream joined with itself).
- ``with_tax_rate``: each sale joined to the tax rate valid at the sale's event time (a slowly
  changing dimension with validity intervals). It depends only on event time, so reprocessing the
  same events always gives the same answer, however late or reordered they arrive.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SEARCH_SCHEMA = "search_id string, user string, query string, ts long"
CLICK_SCHEMA = "search_id string, user string, url string, ts long"


def parse_json(raw: DataFrame, schema: str, time_column: str) -> DataFrame:
    parsed = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
    return parsed.withColumn(time_column, F.timestamp_millis("ts")).drop("ts")


def click_through(searches: DataFrame, clicks: DataFrame, lateness: str = "10 minutes") -> DataFrame:
    s = searches.withWatermark("search_time", lateness).alias("s")
    c = clicks.withWatermark("click_time", lateness)
    # a search counts one click at most (a repeated click is the same click-through)
    c = c.dropDuplicatesWithinWatermark(["search_id"]) if c.isStreaming else c.dropDuplicates(["search_id"])
    c = c.select("search_id", "url", "click_time").alias("c")
    joined = s.join(
        c,
        F.expr("s.search_id = c.search_id AND c.click_time >= s.search_time "
               "AND c.click_time <= s.search_time + interval 1 hour"),
        "leftOuter",
    )
    per_query = joined.groupBy(F.window("s.search_time", "1 hour").alias("window"), F.col("s.query").alias("query")) \
        .agg(F.count(F.lit(1)).alias("searches"), F.count("c.click_time").alias("clicks"))
    return per_query.select(F.col("window.start").alias("window_start"), "query", "searches", "clicks",
                            (F.col("clicks") / F.col("searches")).alias("ctr"))


def repeat_actions(events: DataFrame, time_column: str = "search_time", within: str = "30 minutes",
                   lateness: str = "10 minutes") -> DataFrame:
    a = events.withWatermark(time_column, lateness).alias("a")
    b = events.withWatermark(time_column, lateness).alias("b")
    return a.join(b, F.expr(f"a.user = b.user AND b.{time_column} > a.{time_column} "
                            f"AND b.{time_column} <= a.{time_column} + interval {within}")).select(
        F.col("a.user").alias("user"), F.col(f"a.{time_column}").alias("first_time"),
        F.col(f"b.{time_column}").alias("second_time"), F.col("a.query").alias("first_query"),
        F.col("b.query").alias("second_query"))


def with_tax_rate(sales: DataFrame, rates: DataFrame) -> DataFrame:
    """sales(sale_id, region, amount, sale_time) x rates(region, rate, valid_from, valid_to|null)."""
    s, r = sales.alias("s"), rates.alias("r")
    cond = (F.col("s.region") == F.col("r.region")) & (F.col("s.sale_time") >= F.col("r.valid_from")) & (
        F.col("r.valid_to").isNull() | (F.col("s.sale_time") < F.col("r.valid_to")))
    return s.join(r, cond, "left").select("s.sale_id", "s.region", "s.amount", "s.sale_time", "r.rate",
                                          (F.col("s.amount") * F.col("r.rate")).alias("tax"))

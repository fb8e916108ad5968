"""The warehouse: change topics (Debezium envelopes) into Parquet with Spark, queried with DuckDB.

``change_events`` is a pure DataFrame function: one row per change with its key, operation, the row
after it (JSON text) and its place in the log. Spark's file sink writes them exactly once; the
current table is the latest change per key that is not a delete, which ``current_table`` asks of
DuckDB. Rows written twice by a replayed batch are identical, so the answer does not change.
"""

from __future__ import annotations

import json
import os

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def change_events(raw: DataFrame) -> DataFrame:
    value = F.col("value").cast("string")
    return raw.where(F.col("value").isNotNull()).select(
        F.col("topic"),
        F.col("key").cast("string").alias("key"),
        F.col("partition"),
        F.col("offset"),
        F.get_json_object(value, "$.op").alias("op"),
        F.get_json_object(value, "$.after").alias("row_json"),
        F.get_json_object(value, "$.source.lsn").cast("long").alias("lsn"),
        (F.get_json_object(value, "$.source.ts_ms").cast("long") / 1000).cast("timestamp").alias("committed_at"),
    )


def start(spark, bootstrap: str, topics: list[str], path: str, checkpoint: str, available_now: bool = False):
    raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest").load())
    writer = (change_events(raw).writeStream.format("parquet").option("path", path)
              .option("checkpointLocation", checkpoint).partitionBy("topic").queryName("warehouse"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="2 seconds")
    return writer.start()


def current_table(path: str, topic: str) -> dict[str, dict]:
    """key -> row, the latest state of one table, computed by DuckDB over the Parquet files."""
    import duckdb

    files = os.path.join(path, f"topic={topic}", "*.parquet")
    rows = duckdb.sql(f"""
        SELECT key, row_json FROM (
            SELECT key, op, row_json,
                   row_number() OVER (PARTITION BY key ORDER BY partition, "offset" DESC) AS newest
            FROM read_parquet('{files}')
        ) WHERE newest = 1 AND op <> 'd'
    """).fetchall()
    return {json.dumps(json.loads(k), sort_keys=True): json.loads(r) for k, r in rows}

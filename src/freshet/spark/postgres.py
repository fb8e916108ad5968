"""PostgreSQL upsert sink for ``foreachBatch``: exactly-once for update-mode results.

    query = result.writeStream.outputMode("update").foreachBatch(
        PostgresUpsertSink(dsn, "requests_per_minute", ["window_start"], "rpm")).start()

Each microbatch is written in one transaction that also records the batch id in
``freshet_sink_progress``; a batch Spark replays after a crash finds its id there and is
skipped, and rows are upserted by primary key, so every result row appears exactly once with
its latest value.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType, FloatType, IntegerType,
    LongType, ShortType, StringType, TimestampType,
)

from freshet.client.postgres import connection, quote_ident

PROGRESS_TABLE = "freshet_sink_progress"


def pg_type(t: DataType) -> str:
    if isinstance(t, (LongType,)):
        return "bigint"
    if isinstance(t, (IntegerType, ShortType)):
        return "integer"
    if isinstance(t, (DoubleType, FloatType)):
        return "double precision"
    if isinstance(t, DecimalType):
        return f"numeric({t.precision},{t.scale})"
    if isinstance(t, BooleanType):
        return "boolean"
    if isinstance(t, TimestampType):
        return "timestamptz"
    if isinstance(t, DateType):
        return "date"
    if isinstance(t, BinaryType):
        return "bytea"
    if isinstance(t, ArrayType):
        element = pg_type(t.elementType)
        # arrays of structs, maps or arrays: one jsonb value (PostgreSQL arrays are not nested)
        return "jsonb" if element == "jsonb" or element.endswith("[]") else element + "[]"
    if isinstance(t, StringType):
        return "text"
    return "jsonb"  # structs, maps and anything else


def plain(value):
    """A collected value as JSON can hold it: Rows become objects, recursively; a VARIANT its JSON value."""
    from pyspark.sql import Row
    from pyspark.sql.types import VariantVal

    if isinstance(value, VariantVal):
        import json

        return json.loads(value.toJson())  # (toPython() would make 1.5 a Decimal, written as text)
    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def column_adapter(t: DataType):
    """How a collected value of Spark type ``t`` is handed to psycopg2, or None to pass it as it is."""
    import json

    from psycopg2.extras import Json

    if isinstance(t, TimestampType):
        # PySpark collects a timestamp as a naive datetime in this process's local time zone; made
        # aware, it means the same instant whatever the PostgreSQL session's time zone
        return lambda v: v.astimezone() if v is not None and v.tzinfo is None else v
    if pg_type(t) == "jsonb":
        return lambda v: None if v is None else Json(plain(v), dumps=lambda o: json.dumps(o, default=str))
    return None


def ensure_progress_table(cur) -> None:
    cur.execute(f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} "
                "(sink_id text PRIMARY KEY, batch_id bigint NOT NULL, updated_at timestamptz DEFAULT now())")


def claim_batch(cur, sink_id: str, batch_id: int) -> bool:
    """In the caller's transaction: False when ``batch_id`` was written already (a replay after a
    crash); otherwise record it as written, which commits with the batch's rows or not at all."""
    cur.execute(f"INSERT INTO {PROGRESS_TABLE} (sink_id, batch_id) VALUES (%s, -1) "
                "ON CONFLICT (sink_id) DO NOTHING", (sink_id,))
    cur.execute(f"SELECT batch_id FROM {PROGRESS_TABLE} WHERE sink_id = %s FOR UPDATE", (sink_id,))
    (done,) = cur.fetchone()
    if batch_id <= done:
        return False
    cur.execute(f"UPDATE {PROGRESS_TABLE} SET batch_id = %s, updated_at = now() WHERE sink_id = %s",
                (batch_id, sink_id))
    return True


class PostgresUpsertSink:
    """``add_columns`` are counters: a batch's value is added to the stored one (a running total kept
    in PostgreSQL; exactly-once too, since the addition commits with the batch id). ``transform``
    turns each microbatch into the rows to write (e.g. a per-batch aggregation)."""

    def __init__(self, dsn: str, table: str, key_columns: list[str], sink_id: str | None = None,
                 add_columns: list[str] | None = None, transform=None) -> None:
        if not key_columns:
            raise ValueError("an upsert sink needs the result's primary key columns")
        self.dsn = dsn
        self.table = table
        self.key_columns = key_columns
        self.sink_id = sink_id or table
        self.add_columns = list(add_columns or [])
        self.transform = transform
        self._ready = False

    def ensure_table(self, conn, schema) -> None:
        columns = ", ".join(f"{quote_ident(f.name)} {pg_type(f.dataType)}" for f in schema.fields)
        keys = ", ".join(quote_ident(k) for k in self.key_columns)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE IF NOT EXISTS {quote_ident(self.table)} ({columns}, PRIMARY KEY ({keys}))")
            ensure_progress_table(cur)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from psycopg2.extras import execute_batch

        if self.transform is not None:
            df = self.transform(df)
        schema = df.schema
        missing = [k for k in self.key_columns if k not in schema.fieldNames()]
        if missing:
            raise ValueError(f"key column(s) {missing} are not in the result {schema.fieldNames()}")
        rows = df.collect()
        names = schema.fieldNames()
        with connection(self.dsn) as conn:
            if not self._ready:
                self.ensure_table(conn, schema)
                conn.commit()
                self._ready = True
            with conn.cursor() as cur:
                if not claim_batch(cur, self.sink_id, batch_id):
                    return  # a replay of a batch already written: exactly-once
                if rows:
                    cols = ", ".join(quote_ident(n) for n in names)
                    placeholders = ", ".join(["%s"] * len(names))
                    table = quote_ident(self.table)
                    updates = ", ".join(
                        f"{quote_ident(n)} = {table}.{quote_ident(n)} + EXCLUDED.{quote_ident(n)}"
                        if n in self.add_columns else f"{quote_ident(n)} = EXCLUDED.{quote_ident(n)}"
                        for n in names if n not in self.key_columns)
                    keys = ", ".join(quote_ident(k) for k in self.key_columns)
                    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
                    adapters = [column_adapter(f.dataType) for f in schema.fields]
                    execute_batch(
                        cur,
                        f"INSERT INTO {table} ({cols}) VALUES ({placeholders}) "
                        f"ON CONFLICT ({keys}) {action}",
                        [tuple(v if adapt is None else adapt(v) for v, adapt in zip(r, adapters, strict=True))
                         for r in rows],
                        page_size=500,
                    )

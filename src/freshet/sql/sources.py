"""A stream or table definition -> a streaming DataFrame read through the freshet source, with the declared
columns decoded from each record's value, and event time and watermark as the pipelines have them.

Every row also has ``ROWTIME`` (the event time: the ``timestamp`` column when there is one, else the record's
timestamp); stream rows have ``ROWPARTITION`` and ``ROWOFFSET`` (which record it came from). A table is the
latest row per key: a streaming aggregation, so a push query over it shows each key's new row as it changes;
a key whose latest change is a delete (Debezium ``op = 'd'``, or a tombstone) leaves the table.
"""

# no ``from __future__ import annotations``: pandas_udf reads the decoder's type hints as types
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.pipelines.runner import PipelineSpec
from freshet.pipelines.runner import source as freshet_source
from freshet.pipelines.stateful import DEFAULT_LATENESS

from .catalog import Definition
from .errors import SqlError

PSEUDO_COLUMNS = ("ROWTIME", "ROWPARTITION", "ROWOFFSET")
_DELETED = "__freshet_deleted"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def ddl(defn: Definition) -> str:
    """The declared (not computed) columns as Spark DDL: "`a` STRING, `b` INT"."""
    return ", ".join(f"{quote(c.name)} {c.type}" for c in defn.columns if c.expr is None)


def _is_epoch(type_: str | None) -> bool:
    return (type_ or "").strip().upper() in ("BIGINT", "LONG")


def decode(raw: DataFrame, defn: Definition) -> DataFrame:
    """The raw records (key, value, topic, partition, offset, timestamp...) -> the declared columns, plus
    ``ROWTIME``, ``ROWPARTITION``, ``ROWOFFSET`` and, for tables, whether the record deletes its key."""
    value = F.col("value")
    text = value.cast("string")
    plain = [c for c in defn.columns if c.expr is None]
    deleted: SparkColumn = value.isNull()
    if defn.format == "json":
        parsed = F.from_json(text, ddl(defn))
    elif defn.format == "csv":
        parsed = F.from_csv(text, ddl(defn), {"sep": defn.options.get("delimiter", ",")})
    elif defn.format == "raw":
        column = plain[0]
        parsed = F.struct((value if column.type.upper() == "BINARY" else text).alias(column.name))
    elif defn.format == "debezium":
        envelope = F.from_json(text, f"before STRUCT<{ddl(defn)}>, "
                                     f"after STRUCT<{ddl(defn)}>, op STRING, payload STRING")
        # Debezium with its JSON converter's schemas on wraps the envelope in {"schema": ..., "payload": ...}
        inner = F.from_json(envelope["payload"], f"before STRUCT<{ddl(defn)}>, after STRUCT<{ddl(defn)}>, op STRING")
        before = F.coalesce(envelope["before"], inner["before"])
        after = F.coalesce(envelope["after"], inner["after"])
        op = F.coalesce(envelope["op"], inner["op"])
        parsed = F.when(op == "d", before).otherwise(after)
        deleted = deleted | (op == "d")
    elif defn.format == "avro":
        parsed = _avro_decoder(defn)(value)
    else:
        raise SqlError(f"format {defn.format!r} cannot be read")
    columns = [parsed[c.name].alias(c.name) for c in plain]
    if defn.kind == "table" and defn.key:
        key_col = defn.column(defn.key)
        if key_col is not None and key_col.expr is None:
            # a tombstone has no value: its key comes from the record's key (JSON {"id": ...} or the bare key)
            record_key = F.col("key").cast("string")
            from_key = F.coalesce(F.get_json_object(record_key, f"$.{key_col.name}"), record_key)
            columns = [F.coalesce(parsed[c.name], from_key.cast(c.type)).alias(c.name) if c is key_col
                       else parsed[c.name].alias(c.name) for c in plain]
    df = raw.select(*columns, F.col("timestamp").alias("__record_time"), F.col("partition").alias("ROWPARTITION"),
                    F.col("offset").alias("ROWOFFSET"), deleted.alias(_DELETED))
    for c in plain:
        if defn.timestamp and c.name.lower() == defn.timestamp.lower() and _is_epoch(c.type):
            df = df.withColumn(c.name, F.timestamp_millis(F.col(quote(c.name))))  # epoch milliseconds
    for c in defn.columns:
        if c.expr is not None:
            df = df.withColumn(c.name, F.expr(c.expr))
    event_time = F.col(quote(defn.timestamp)) if defn.timestamp else F.col("__record_time")
    df = df.withColumn("ROWTIME", event_time).drop("__record_time")
    names = [c.name for c in defn.columns]
    return df.select(*[quote(n) for n in names], *PSEUDO_COLUMNS, _DELETED)


def dataframe(spark, defn: Definition, bootstrap: str, starting_offsets: str = "earliest",
              snapshot: bool = False) -> DataFrame:
    """The streaming DataFrame of ``defn``: a stream's rows, or a table's latest row per key.

    ``snapshot`` (tables): a batch DataFrame instead, reading the topic to its end each time it is planned. Joined to
    a stream, Spark plans it again for every microbatch, so each stream row meets the table as it is when the row is
    processed (ksqlDB's stream-table join); Spark does not join a stream to a streaming aggregation."""
    if snapshot:
        raw = _snapshot_reader(spark)(F.lit(bootstrap), F.lit(defn.topic))
    else:
        spec = PipelineSpec(pipeline="sql", source_topic=defn.topic, sink="console", bootstrap=bootstrap,
                            checkpoint="", starting_offsets=starting_offsets)
        raw = freshet_source(spark, spec)
    rows = decode(raw, defn)
    names = [quote(c.name) for c in defn.columns]
    if defn.kind == "stream":
        rows = rows.withWatermark(defn.timestamp or "ROWTIME", defn.watermark or DEFAULT_LATENESS)
        return rows.drop(_DELETED)
    # a table: the latest change per key (offsets rise within a partition, and a key lives in one partition)
    latest = (rows.groupBy(quote(defn.key))
              .agg(F.max_by(F.struct(*names, "ROWTIME", _DELETED), F.col("ROWOFFSET")).alias("latest")))
    return latest.where(~F.col(f"latest.{_DELETED}")).select(
        *[F.col(f"latest.{n}").alias(c.name) for n, c in zip(names, defn.columns)], F.col("latest.ROWTIME"))


_SNAPSHOT_READERS: dict = {}


def _snapshot_reader(spark):
    """A Python UDTF reading a topic from its start to its end when it runs, not when it is planned: the table
    side of a stream-table join runs again in every microbatch, and so reads the table as it is then. (The freshet
    source's batch reads fix their offsets when planned, once per streaming query.)"""
    if id(spark) in _SNAPSHOT_READERS:
        return _SNAPSHOT_READERS[id(spark)]
    from pyspark.sql.functions import udtf

    @udtf(returnType="key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp")
    class FreshetSnapshot:
        def eval(self, bootstrap: str, topic: str):
            import datetime

            from freshet.client.admin import TopicAdmin
            from freshet.client.reading import read_to_end, reader

            records = []
            consumer = reader(bootstrap)
            try:
                partitions = TopicAdmin(bootstrap).partition_count(topic)
                read_to_end(consumer, [(topic, p, -2) for p in range(partitions)], records.append, 120)
            finally:
                consumer.close()
            for m in records:
                stamp = datetime.datetime.fromtimestamp(m.timestamp()[1] / 1000, datetime.timezone.utc)
                yield m.key(), m.value(), topic, m.partition(), m.offset(), stamp

    _SNAPSHOT_READERS[id(spark)] = FreshetSnapshot
    return FreshetSnapshot


def _avro_decoder(defn: Definition):
    """A pandas UDF decoding Avro values into a struct of the columns: schemaless binary, or with
    ``framing='confluent'`` Confluent's wire format (a magic byte 0 and a 4-byte schema id before the record). A
    value that is not a record of the schema becomes a row of nulls."""
    import json

    import pandas as pd

    schema_json = defn.options["schema"]
    plain = [c.name for c in defn.columns if c.expr is None]
    skip = 5 if defn.options.get("framing", "none").lower() == "confluent" else 0

    @F.pandas_udf(f"STRUCT<{ddl(defn)}>")
    def decode_avro(values: pd.Series) -> pd.DataFrame:
        import io

        import fastavro

        schema = fastavro.parse_schema(json.loads(schema_json))
        rows = []
        for v in values:
            row = None
            if v is not None and len(v) > skip:
                try:
                    row = fastavro.schemaless_reader(io.BytesIO(bytes(v)[skip:]), schema)
                except Exception:  # not a record of this schema
                    row = None
            rows.append({n: (row or {}).get(n) for n in plain})
        return pd.DataFrame(rows, columns=plain)

    return decode_avro

"""``writeStream.format("freshet")``: write rows to topics, as Spark's Kafka sink does.

Columns: ``value`` (required, string or binary), ``key`` (optional, string or binary), ``topic``
(optional; the ``topic`` option, when given, overrides it), ``partition`` (optional int),
``headers`` (optional array<struct<key: string, value: binary>>). Other types are refused up front.
Delivery is at-least-once, like Spark's Kafka sink: a batch replayed after a crash is written
again; readers that need exactly-once use the record key to deduplicate or upsert.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .offsets import SourceError


@dataclass
class WrittenCount(WriterCommitMessage):
    records: int


def _as_bytes(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode()


def check_column_types(schema: StructType) -> None:
    """The column types Spark's Kafka sink takes; anything else is refused before a record is written."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType

    types = {f.name: f.dataType for f in schema.fields}
    text = (StringType, BinaryType)
    for name, allowed, described in (("value", text, "string or binary"), ("key", text, "string or binary"),
                                     ("topic", (StringType,), "string"), ("partition", (IntegerType,), "int")):
        if name in types and not isinstance(types[name], allowed):
            raise SourceError(f"the {name} column must be {described}, not {types[name].simpleString()}")
    headers = types.get("headers")
    if headers is not None:
        element = headers.elementType if isinstance(headers, ArrayType) else None
        fields = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        if (set(fields) != {"key", "value"} or not isinstance(fields["key"], StringType)
                or not isinstance(fields["value"], text)):
            raise SourceError("the headers column must be array<struct<key: string, value: binary>>, "
                              f"not {headers.simpleString()}")


class _TopicWriter:
    def __init__(self, options: dict, schema: StructType) -> None:
        self.options = {k.lower(): v for k, v in options.items()}
        self.bootstrap = self.options.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise SourceError("option kafka.bootstrap.servers is required")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise SourceError("the sink needs a value column")
        self.topic = self.options.get("topic")
        if self.topic is None and "topic" not in names:
            raise SourceError("give a topic option or a topic column")
        check_column_types(schema)
        self.producer_options = {
            k[len("kafka."):]: v for k, v in self.options.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }

    def write(self, iterator) -> WrittenCount:
        from confluent_kafka import Producer

        from freshet.client import producer_config
        from freshet.client.produce import produce_waiting

        producer = Producer(producer_config(self.bootstrap, {"log_level": 0, **self.producer_options}))
        failures: list = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                failures.append(err)

        count = 0
        for row in iterator:
            fields = row.asDict()
            topic = self.topic or fields.get("topic")  # the option overrides the column, as in Spark
            if topic is None:
                raise SourceError("a row's topic is null; give the topic option for such rows")
            extra = {}
            if fields.get("partition") is not None:
                extra["partition"] = int(fields["partition"])
            headers = fields.get("headers")
            if headers:
                extra["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers]
            produce_waiting(producer, topic, _as_bytes(fields.get("value")), _as_bytes(fields.get("key")),
                            on_delivery=on_delivery, **extra)
            count += 1
            if count % 10000 == 0:
                producer.poll(0)
            if failures:
                break
        left = producer.flush(60)
        if failures or left:
            raise RuntimeError(f"{len(failures) + left} records were not delivered"
                               + (f": {failures[0].str()}" if failures else ""))
        return WrittenCount(count)


class FreshetStreamWriter(_TopicWriter, DataSourceStreamWriter):
    def commit(self, messages, batchId: int) -> None:
        """Records are acknowledged (acks=all) by the time write() returns."""

    def abort(self, messages, batchId: int) -> None:
        """Nothing to undo: written records stay (at-least-once)."""


class FreshetBatchWriter(_TopicWriter, DataSourceWriter):
    pass

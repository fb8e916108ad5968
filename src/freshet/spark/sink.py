"""``writeStream.format("freshet")``: write rows to topics, as Spark's Kafka sink does.

Columns: ``value`` (required, string or binary), ``key`` (optional, string or binary), ``topic``
(optional; the ``topic`` option, when given, overrides it), ``partition`` (optional int),
``headers`` (optional array<struct<key: string, value: binary>>). Other types are refused up front.
By default delivery is at-least-once, like Spark's Kafka sink: a batch replayed after a crash is
written again. With ``.option("exactlyOnce", "true")`` each task writes its share of a microbatch in
one Kafka transaction, and commits in that same transaction the batch id as its progress (a committed
offset of the consumer group named by its transactional id, on ``__freshet_sink_progress``). The
transactional id is the query's id and the task's partition, so a replayed task (the driver or an
executor died) first fences and aborts whatever an earlier attempt left open, then finds whether its
batch was already committed, and if so writes nothing. Readers with isolation.level=read_committed (the
librdkafka default) see every row exactly once. A microbatch's tasks commit one by one, so a reader may
see part of a batch before the rest; never a row twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .offsets import SourceError

PROGRESS_TOPIC = "__freshet_sink_progress"  # exactly-once sinks commit their batch ids against its partition 0


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
        flag = self.options.get("exactlyonce", "false").strip().lower()
        if flag not in ("true", "false"):
            raise SourceError(f"exactlyOnce must be true or false, got {self.options['exactlyonce']!r}")
        self.exactly_once = flag == "true"
        if self.exactly_once:
            self._ensure_progress_topic()

    def _ensure_progress_topic(self) -> None:
        """Driver, when the query starts: the topic whose partition 0 carries the tasks' committed batch ids."""
        from freshet.client import ClientError, TopicAdmin

        admin = TopicAdmin(self.bootstrap)
        try:
            if PROGRESS_TOPIC not in admin.list_topics():
                admin.create_topic(PROGRESS_TOPIC, 1)
        except ClientError as exc:
            if "already exists" not in str(exc):
                raise SourceError(f"exactlyOnce: {exc}") from None

    def write(self, iterator) -> WrittenCount:
        if self.exactly_once:
            return self._write_transactionally(iterator)
        from confluent_kafka import Producer

        from freshet.client import producer_config

        producer = Producer(producer_config(self.bootstrap, {"log_level": 0, **self.producer_options}))
        count = self._produce_rows(producer, iterator)
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} records were not delivered")
        return WrittenCount(count)

    def _write_transactionally(self, iterator) -> WrittenCount:
        """Executor: this task's rows and its batch id in one transaction; nothing if the batch is committed."""
        from confluent_kafka import Consumer, Producer, TopicPartition
        from pyspark import TaskContext

        from freshet.client import TRANSACTIONAL_OFFSETS, consumer_config, producer_config

        task = TaskContext.get()
        # a stream writer's task carries its query and batch ids; a batch write inside foreachBatch is
        # told them (options batchId and queryId), since the callback's jobs do not inherit them
        batch = self.options.get("batchid") or (task.getLocalProperty("streaming.sql.batchId") if task else None)
        query = self.options.get("queryid") or (task.getLocalProperty("sql.streaming.queryId") if task else None)
        if batch is None or query is None or task is None:
            raise SourceError("exactlyOnce needs a streaming query: writeStream, or write inside foreachBatch "
                              "with the options batchId and queryId")
        transactional_id = f"freshet-sink-{query}-{task.partitionId()}"
        producer = Producer(producer_config(self.bootstrap, {
            "log_level": 0, "transactional.id": transactional_id, **TRANSACTIONAL_OFFSETS, **self.producer_options}))
        progress = Consumer(consumer_config(self.bootstrap, transactional_id, {
            "log_level": 0, "isolation.level": "read_committed"}))
        try:
            producer.init_transactions(60)  # fences an earlier attempt of this task and aborts what it left open
            done = progress.committed([TopicPartition(PROGRESS_TOPIC, 0)], 60)[0].offset
            if done > int(batch):  # this task's share of the batch is already committed: a replay
                for _ in iterator:
                    pass
                return WrittenCount(0)
            producer.begin_transaction()
            count = self._produce_rows(producer, iterator)
            producer.send_offsets_to_transaction([TopicPartition(PROGRESS_TOPIC, 0, int(batch) + 1)],
                                                 progress.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            return WrittenCount(count)
        finally:
            progress.close()

    def _produce_rows(self, producer, batches) -> int:
        """Produce every row of the Arrow batches (the writer is an Arrow writer: no Row object per record;
        each column comes out of Arrow at once)."""
        failures: list = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                failures.append(err)

        count = 0
        produce = producer.produce
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            names = batch.schema.names
            column = lambda name: batch.column(names.index(name)).to_pylist() if name in names else None  # noqa: E731
            values, keys = column("value"), column("key")
            topics = [self.topic] * n if self.topic else column("topic")
            partitions, headers = column("partition"), column("headers")
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise SourceError("a row's topic is null; give the topic option for such rows")
                extra = {}
                if partitions is not None and partitions[i] is not None:
                    extra["partition"] = partitions[i]
                if headers is not None and headers[i]:
                    extra["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
                value, key = _as_bytes(values[i]), _as_bytes(keys[i]) if keys is not None else None
                while True:
                    try:
                        produce(topic, value, key, on_delivery=on_delivery, **extra)
                        break
                    except BufferError:  # librdkafka's queue is full: serve delivery reports, then again
                        producer.poll(0.05)
                count += 1
                if count % 10000 == 0:
                    producer.poll(0)
                if failures:
                    break
            if failures:
                break
        producer.flush(60)
        if failures:
            raise RuntimeError(f"{len(failures)} records were not delivered: {failures[0].str()}")
        return count


class FreshetStreamWriter(_TopicWriter, DataSourceStreamArrowWriter):
    def commit(self, messages, batchId: int) -> None:
        """Driver: records are acknowledged (acks=all), or their transactions committed, by the time each
        task's write() returns."""

    def abort(self, messages, batchId: int) -> None:
        """Driver: nothing to undo. At-least-once: written records stay. Exactly-once: a task that failed
        before its commit left an open transaction, aborted when the task is tried again."""


class FreshetBatchWriter(_TopicWriter, DataSourceArrowWriter):
    pass

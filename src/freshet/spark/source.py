"""``spark.readStream.format("freshet")``: a PySpark Python Data Source over any Kafka cluster.

Options and columns follow Spark's own Kafka source, so a query can switch between them:

    spark.readStream.format("freshet")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "access-logs")            # or subscribePattern, or assign
        .option("startingOffsets", "earliest")         # latest (default) or JSON per partition
        .option("maxOffsetsPerTrigger", 500000)
        .load()

Columns: key, value (binary), topic, partition, offset, timestamp, timestampType, and headers
with ``includeHeaders``. Offsets live in Spark's checkpoint as ``{"topic": {"0": 42}}``, so a
restarted query resumes where it stopped; partitions added later are read from their start.

Each microbatch is split into one input partition per topic-partition range, read in the
executors with confluent-kafka and handed to Spark as Arrow record batches. Ranges shorter than
``minRecordsPerPartition`` (default 5000) are packed together: a Spark task costs 50-90 ms here
whatever it reads, which small live microbatches would otherwise pay once per topic-partition.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from .offsets import ClusterView, Offsets, SourceError, from_json, parse_subscription, resolve, to_json

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool = False) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def _flag(options: dict, name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if str(value).lower() not in ("true", "false"):
        raise SourceError(f"option {name} takes true or false, got {value!r}")
    return str(value).lower() == "true"


def _bootstrap(options: dict) -> str:
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise SourceError("option kafka.bootstrap.servers is required")
    return bootstrap


@dataclass
class TopicPartitionRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap: str
    include_headers: bool
    fail_on_data_loss: bool
    consumer_options: dict

    def __post_init__(self) -> None:
        super().__init__(None)


ROWS_PER_ARROW_BATCH = 65536


def all_ok(messages) -> bool:
    """No error (end-of-partition, offset reset) among a consume() result."""
    from confluent_kafka import Message

    return not any(map(Message.error, messages))


def read_range(split: TopicPartitionRange, schema: StructType):
    """Read one range with confluent-kafka in an executor; yield pyarrow RecordBatches."""
    from operator import itemgetter

    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    consumer = Consumer({
        "bootstrap.servers": split.bootstrap, "group.id": f"freshet-spark-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "error", "enable.partition.eof": True,
        "fetch.queue.backoff.ms": 10, "log_level": 0,
        # fetch what the range needs and not much more: librdkafka prefetches (queued.min.messages,
        # 100k by default) and parses whole fetches, and what lies past the range's end is read,
        # sent and parsed for nothing. 83k-record ranges of a longer partition, measured:
        # 16 MB fetches, 100k queued: 400-480k records/s; 4 MB, 20k queued: 600-710k.
        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 4 << 20,
        "queued.min.messages": max(1000, min(20_000, split.end - split.start)),
        **split.consumer_options,
    })
    topic_col_value = split.topic
    start = split.start
    try:
        consumer.assign([TopicPartition(split.topic, split.partition, start)])
        keys: list = []
        values: list = []
        offsets: list = []
        stamps: list = []
        types: list = []
        headers: list = []
        position = start

        def flush():
            n = len(keys)
            kinds = set(types)
            columns = [
                pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                pa.repeat(pa.scalar(topic_col_value, pa.string()), n),
                pa.repeat(pa.scalar(split.partition, pa.int32()), n),
                pa.array(offsets, pa.int64()),
                pc.multiply(pa.array(stamps, pa.int64()), 1000).cast(arrow_schema.field("timestamp").type),
                # librdkafka's 1 (create time) / 2 (log append time) -> Kafka's 0 / 1; nearly always one kind
                pa.repeat(pa.scalar(max(kinds.pop() - 1, 0), pa.int32()), n) if len(kinds) == 1
                else pc.max_element_wise(pc.subtract(pa.array(types, pa.int32()), 1), 0),
            ]
            if split.include_headers:
                columns.append(pa.array(headers, arrow_schema.field("headers").type))
            return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)

        while position < split.end:
            # ask for no more than the range still holds: consume() waits its whole timeout for a
            # count it cannot reach
            messages = consumer.consume(min(10000, split.end - position), 0.5)
            if not messages:
                continue
            last = messages[-1]
            if last.error() is None and last.offset() < split.end and all_ok(messages):
                # the fast path: a run of records wholly inside the range
                keys += map(Message.key, messages)  # method descriptors: no bound method per record
                values += map(Message.value, messages)
                offsets += map(Message.offset, messages)
                timestamps = list(map(Message.timestamp, messages))
                stamps += map(itemgetter(1), timestamps)
                types += map(itemgetter(0), timestamps)
                if split.include_headers:
                    headers += [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages]
                position = last.offset() + 1
            else:
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if msg.offset() > position:
                                position = msg.offset()  # a gap (compaction): nothing more below it
                            if msg.offset() >= split.end:
                                position = split.end
                            continue
                        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            low, _high = consumer.get_watermark_offsets(
                                TopicPartition(split.topic, split.partition), timeout=10)
                            if split.fail_on_data_loss:
                                raise RuntimeError(
                                    f"offsets {position}..{low - 1} of {split.topic}-{split.partition} were deleted "
                                    "(retention) before they were read; set failOnDataLoss=false to skip them")
                            position = low
                            if position < split.end:
                                consumer.assign([TopicPartition(split.topic, split.partition, position)])
                            break
                        raise RuntimeError(f"reading {split.topic}-{split.partition}: {err.str()}")
                    offset = msg.offset()
                    if offset >= split.end:
                        position = split.end
                        break
                    keys.append(msg.key())
                    values.append(msg.value())
                    offsets.append(offset)
                    ts_type, ts = msg.timestamp()
                    stamps.append(ts)
                    types.append(ts_type)
                    if split.include_headers:
                        headers.append([{"key": k, "value": v} for k, v in (msg.headers() or [])])
                    position = offset + 1
            if len(keys) >= ROWS_PER_ARROW_BATCH:
                yield flush()
                keys, values, offsets, stamps, types, headers = [], [], [], [], [], []
        if keys:
            yield flush()
    finally:
        consumer.close()


class _Common:
    def __init__(self, options: dict, schema: StructType) -> None:
        self.options = {k.lower(): v for k, v in options.items()}
        self.schema = schema
        self.bootstrap = _bootstrap(self.options)
        kind, subscription = parse_subscription(self.options)
        self.view = ClusterView(self.bootstrap, kind, subscription)
        self.include_headers = _flag(self.options, "includeHeaders", False)
        self.fail_on_data_loss = _flag(self.options, "failOnDataLoss", True)
        self.consumer_options = {
            k[len("kafka."):]: v for k, v in self.options.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        value = self.options.get("minrecordsperpartition", str(MIN_RECORDS_PER_PARTITION))
        if not value.isdigit():
            raise SourceError(f"minRecordsPerPartition must be a whole number (0: never pack), got {value!r}")
        self.min_records = int(value)

    def _ranges(self, start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> list:
        ranges = []
        for tp, until in sorted(end.items()):
            since = start.get(tp, 0)
            if until > since:
                ranges.append(TopicPartitionRange(tp[0], tp[1], since, until, self.bootstrap, self.include_headers,
                                                  self.fail_on_data_loss, self.consumer_options))
        return pack_ranges(ranges, self.min_records) if self.min_records else ranges


@dataclass
class RangePack(InputPartition):
    """Several short ranges read one after another by one Spark task."""

    ranges: list

    def __post_init__(self) -> None:
        super().__init__(None)


MIN_RECORDS_PER_PARTITION = 5000


def pack_ranges(ranges: list, min_records: int) -> list:
    """Ranges of at least ``min_records`` stay one input partition each; the shorter ones are dealt
    into as many packs as hold ``min_records`` between them (longest first, to the lightest pack)."""
    long = [r for r in ranges if r.end - r.start >= min_records]
    short = sorted((r for r in ranges if r.end - r.start < min_records), key=lambda r: r.start - r.end)
    if len(short) < 2:
        return long + short
    count = max(1, min(len(short), sum(r.end - r.start for r in short) // min_records))
    packs: list[list] = [[] for _ in range(count)]
    loads = [0] * len(packs)
    for r in short:
        i = loads.index(min(loads))
        packs[i].append(r)
        loads[i] += r.end - r.start
    return long + [RangePack(p) if len(p) > 1 else p[0] for p in packs]


def read_partition(partition, schema: StructType):
    for r in partition.ranges if isinstance(partition, RangePack) else [partition]:
        yield from read_range(r, schema)


class FreshetStreamReader(_Common, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict, schema: StructType) -> None:
        super().__init__(options, schema)
        max_offsets = self.options.get("maxoffsetspertrigger")
        try:
            self.max_offsets = int(max_offsets) if max_offsets is not None else None
        except ValueError:
            raise SourceError(f"maxOffsetsPerTrigger must be a whole number, got {max_offsets!r}") from None
        self.available_now_target: dict[tuple[str, int], int] | None = None

    def initialOffset(self) -> dict:
        partitions = self.view.partitions()
        return to_json(resolve(self.options.get("startingoffsets", "latest"), "latest", self.view, partitions))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def _latest(self, start: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        if self.available_now_target is not None:
            return dict(self.available_now_target)
        partitions = self.view.partitions()
        latest = self.view.offsets("latest", partitions)
        new = [tp for tp in partitions if tp not in start]
        if new:  # partitions created after the query started: read them from their beginning
            earliest = self.view.offsets("earliest", new)
            for tp in new:
                start[tp] = earliest[tp]
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        latest = self._latest(begin)
        end = {tp: max(latest.get(tp, off), off) for tp, off in begin.items()}
        for tp, off in latest.items():
            end.setdefault(tp, off)
        if isinstance(limit, ReadMaxRows):
            end = _cap(begin, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        partitions = self.view.partitions()
        return to_json(self.view.offsets("latest", partitions))

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.view.partitions()
        self.available_now_target = self.view.offsets("latest", partitions)

    def partitions(self, start: dict, end: dict) -> list:
        begin = from_json(start)
        finish = from_json(end)
        for tp in finish:
            if tp not in begin:
                begin[tp] = self.view.offsets("earliest", [tp])[tp]
        return self._ranges(begin, finish)

    def read(self, partition: TopicPartitionRange | RangePack):
        return read_partition(partition, self.schema)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing to commit to the cluster."""


def _cap(begin: dict, end: dict, max_rows: int) -> dict:
    """Spread ``max_rows`` over partitions in proportion to what each has waiting (as Spark's Kafka source)."""
    waiting = {tp: end[tp] - begin.get(tp, end[tp]) for tp in end}
    total = sum(w for w in waiting.values() if w > 0)
    if total <= max_rows:
        return end
    capped = {}
    for tp, off in end.items():
        w = waiting[tp]
        if w <= 0:
            capped[tp] = off
        else:
            capped[tp] = begin[tp] + max(1, int(w * max_rows / total))
    return capped


class FreshetBatchReader(_Common, DataSourceReader):
    def partitions(self) -> list:
        partitions = self.view.partitions()
        start = resolve(self.options.get("startingoffsets", "earliest"), "earliest", self.view, partitions)
        end = resolve(self.options.get("endingoffsets", "latest"), "latest", self.view, partitions)
        for tp in partitions:
            if end[tp] < start[tp]:
                raise SourceError(f"endingOffsets {end[tp]} is before startingOffsets {start[tp]} for {tp[0]}-{tp[1]}")
        return self._ranges(start, end)

    def read(self, partition: TopicPartitionRange | RangePack):
        return read_partition(partition, self.schema)


class FreshetDataSource(DataSource):
    """The ``freshet`` format: read and write Kafka-protocol topics (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "freshet"

    def schema(self) -> StructType:
        return source_schema(_flag({k.lower(): v for k, v in self.options.items()}, "includeHeaders", False))

    def streamReader(self, schema: StructType) -> FreshetStreamReader:
        return FreshetStreamReader(dict(self.options), schema)

    def reader(self, schema: StructType) -> FreshetBatchReader:
        return FreshetBatchReader(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import FreshetStreamWriter

        return FreshetStreamWriter(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import FreshetBatchWriter

        return FreshetBatchWriter(dict(self.options), schema)


__all__ = ["FreshetDataSource", "Offsets", "SourceError", "source_schema"]

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
Batch reads (``spark.read``) take ``startingOffsets`` (default earliest) and ``endingOffsets``
(default latest); as in Spark's Kafka source a batch cannot start at latest or end at earliest,
a stream takes no ``endingOffsets``, and offset JSON may name only partitions the source reads
(those it leaves out take the default). ``kafka.bootstrap.servers`` is a list; through a leader change the
driver asks again for metadata and offsets it could not get, or offsets that lie below where the query stands (a new leader tells
its high watermark as it knew it as a follower until its followers fetch again), ``fetchOffset.numRetries``
times (default 3) ``fetchOffset.retryIntervalMs`` apart (default 1000), as Spark's Kafka source does.

Each microbatch is split into topic-partition ranges, read in the executors and handed to Spark as
Arrow record batches. The ``reader`` option picks how: ``columnar`` (the default where it covers the
settings) sends Fetch requests to each partition's leader and decodes the record batches in C straight
into Arrow buffers (``freshet.client.columnar``: no Python object per record); ``librdkafka`` uses a
confluent-kafka consumer per task (all its ranges at once), for security settings and librdkafka
properties the columnar reader does not cover (``auto``, the default, picks between them). A
Python task costs 20-90 ms here whatever it reads, so ranges shorter than
``minRecordsPerPartition`` (default 5000) are packed together, and the ranges are dealt into at
most ``maxPartitions`` tasks (default: this machine's cores, which is what local mode runs at
once; ``freshet run`` sets it to the session's task slots, on a cluster its executors' cores).

``readOnDriver=true`` (streams only) reads each microbatch in the driver's long-lived Python process instead,
through PySpark's simple stream reader: Spark keeps the records in its block manager and no Python task runs
in the executors for the source, which a live query of small batches pays per microbatch (see
``FreshetDriverStreamReader``; at most ``maxOffsetsPerTrigger`` records a batch, default 100,000 there).
"""

from __future__ import annotations

import gc
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
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
    reader: str = "librdkafka"  # or "columnar" (freshet.client.columnar)

    def __post_init__(self) -> None:
        super().__init__(None)


ROWS_PER_ARROW_BATCH = 65536


@contextmanager
def cyclic_gc_paused():
    """Hold off Python's cycle collector while a consume() result is turned into columns.

    A consume() of 10,000 records allocates 10,000 Message objects (and timestamp tuples) that
    live until their columns are taken; the collector scans them again and again and promotes them
    into the old generations, which triggers full collections of the Spark worker's heap. None of
    them is in a cycle (reference counting frees them all), so pausing the collector for this
    stretch loses nothing. Reading 1M records, measured: 1.73 s of CPU with it, 1.0-1.3 s without.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class RangeColumns:
    """The records read so far from one range, column by column; ``flush`` makes them an Arrow batch."""

    def __init__(self, split: TopicPartitionRange, arrow_schema) -> None:
        self.split = split
        self.arrow_schema = arrow_schema
        self.clear()

    def clear(self) -> None:
        self.count = 0
        self.keys: list = []
        self.values: list = []
        self.offset_chunks: list = []  # an Arrow int64 array per run of records
        self.stamps: list = []
        self.types: list = []
        self.headers: list = []

    def add(self, messages: list) -> None:
        """A run of records (Message objects, no errors) of this range, in offset order."""
        import numpy as np
        import pyarrow as pa
        from confluent_kafka import Message

        if not messages:
            return
        self.keys += map(Message.key, messages)  # method descriptors: no bound method per record
        self.values += map(Message.value, messages)
        first, last = messages[0].offset(), messages[-1].offset()
        if last - first + 1 == len(messages):  # offsets rise, so this run has no gaps
            self.offset_chunks.append(pa.array(np.arange(first, last + 1, dtype=np.int64)))
        else:  # gaps (compaction, transaction markers)
            self.offset_chunks.append(pa.array(list(map(Message.offset, messages)), pa.int64()))
        timestamps = list(map(Message.timestamp, messages))
        self.stamps += map(itemgetter(1), timestamps)
        self.types += map(itemgetter(0), timestamps)
        if self.split.include_headers:
            self.headers += [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages]
        self.count += len(messages)

    def flush(self):
        import pyarrow as pa
        import pyarrow.compute as pc

        n = self.count
        kinds = set(self.types)
        columns = [
            pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.split.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.split.partition, pa.int32()), n),
            pa.concat_arrays(self.offset_chunks),
            pc.multiply(pa.array(self.stamps, pa.int64()), 1000).cast(self.arrow_schema.field("timestamp").type),
            # librdkafka's 1 (create time) / 2 (log append time) -> Kafka's 0 / 1; nearly always one kind
            pa.repeat(pa.scalar(max(kinds.pop() - 1, 0), pa.int32()), n) if len(kinds) == 1
            else pc.max_element_wise(pc.subtract(pa.array(self.types, pa.int32()), 1), 0),
        ]
        if self.split.include_headers:
            columns.append(pa.array(self.headers, self.arrow_schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)
        self.clear()
        return batch


class RangeProgress:
    """Where the reading of one range stands: the next offset to take, and its columns so far."""

    def __init__(self, split: TopicPartitionRange, arrow_schema) -> None:
        self.split = split
        self.position = split.start
        self.columns = RangeColumns(split, arrow_schema)

    @property
    def done(self) -> bool:
        return self.position >= self.split.end

    @property
    def left(self) -> int:
        return max(0, self.split.end - self.position)

    def take(self, messages: list) -> bool:
        """Take a run of consume() results of this range's topic-partition. True when the partition
        reported records deleted before they were read (the caller fails or skips them)."""
        from confluent_kafka import KafkaError, Message

        split = self.split
        last = messages[-1]
        if (last.error() is None and messages[0].offset() >= self.position and last.offset() < split.end
                and not any(map(Message.error, messages))):
            self.columns.add(messages)  # the fast path: records wholly inside the range
            self.position = last.offset() + 1
            return False
        taken = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.position = max(self.position, msg.offset())  # a gap (compaction): nothing more below it
                    if msg.offset() >= split.end:
                        self.position = split.end
                    continue
                if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    self.columns.add(taken)
                    return True
                raise RuntimeError(f"reading {split.topic}-{split.partition}: {err.str()}")
            offset = msg.offset()
            if offset < self.position:
                continue  # fetched again after a re-assignment
            if offset >= split.end:
                self.position = split.end
                break
            taken.append(msg)
            self.position = offset + 1
        self.columns.add(taken)
        return False


def runs(messages: list, multi_topic: bool):
    """Split a consume() result into runs of one topic-partition each: (key, messages)."""
    from confluent_kafka import Message

    if multi_topic:
        keys = list(zip(map(Message.topic, messages), map(Message.partition, messages)))
    else:
        keys = list(map(Message.partition, messages))
    if keys.count(keys[0]) == len(keys):
        yield keys[0], messages
        return
    start = 0
    for i in range(1, len(keys)):
        if keys[i] != keys[i - 1]:
            yield keys[start], messages[start:i]
            start = i
    yield keys[start], messages[start:]


def range_consumer(ranges: list[TopicPartitionRange]):
    """A confluent-kafka consumer (not yet assigned) set up to read ``ranges`` in an executor."""
    from confluent_kafka import Consumer

    from freshet.client import consumer_config

    first = ranges[0]
    return Consumer(consumer_config(first.bootstrap, f"freshet-spark-{uuid.uuid4().hex[:8]}", {
        "auto.offset.reset": "error", "enable.partition.eof": True, "log_level": 0,
        # fetch what the ranges need and not much more: librdkafka prefetches (queued.min.messages
        # per partition, 100k by default) and parses whole fetches, and what lies past a range's end
        # is read, sent and parsed for nothing. 83k-record ranges of a longer partition, measured:
        # 16 MB fetches, 100k queued: 400-480k records/s; 4 MB, 20k queued: 600-710k. Three such
        # ranges in one consumer (median of 6): 4 MB per partition 321 ms, 2 MB 272 ms, 1 MB 246 ms.
        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 1 << 20,
        "queued.min.messages": max(1000, min(20_000, max(r.end - r.start for r in ranges))),
        **first.consumer_options,
    }))


def read_ranges(ranges: list[TopicPartitionRange], schema: StructType):
    """Read ranges of distinct topic-partitions in an executor with the reader the driver chose; yield
    pyarrow RecordBatches, one range each."""
    if ranges[0].reader == "columnar":
        return read_ranges_columnar(ranges, schema)
    return read_ranges_librdkafka(ranges, schema)


def read_ranges_columnar(ranges: list[TopicPartitionRange], schema: StructType):
    """The columnar reader: Fetch requests to the partitions' leaders, record batches decoded in C straight
    into Arrow buffers (freshet.client.columnar)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from freshet.client.columnar import RangeReader, ReadRange

    first = ranges[0]
    reader = RangeReader(first.bootstrap, [ReadRange(r.topic, r.partition, r.start, r.end) for r in ranges],
                         to_arrow_schema(schema, timezone="UTC"), options=first.consumer_options,
                         fail_on_data_loss=first.fail_on_data_loss)
    return reader.batches()


def read_ranges_librdkafka(ranges: list[TopicPartitionRange], schema: StructType):
    """Read ranges of distinct topic-partitions with one confluent-kafka consumer in an executor,
    all at once (librdkafka fetches them together); yield pyarrow RecordBatches, one range each."""
    from confluent_kafka import TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    first = ranges[0]
    consumer = range_consumer(ranges)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    progress = {(r.topic, r.partition): RangeProgress(r, arrow_schema) for r in ranges}
    multi_topic = len({r.topic for r in ranges}) > 1
    by_key = progress if multi_topic else {p: v for (_t, p), v in progress.items()}

    def take(messages: list) -> list[RangeProgress]:
        """Hand a consume() result to the ranges; the ranges it finished."""
        finished = []
        for key, run in (runs(messages, multi_topic) if messages else ()):
            range_progress = by_key.get(key)
            if range_progress is None:
                err = run[0].error()
                if err is not None:
                    raise RuntimeError(f"reading {first.topic}: {err.str()}")
                continue
            was_done = range_progress.done
            if range_progress.take(run):
                skip_deleted(consumer, range_progress)
                reassign()
            elif range_progress.done and not was_done:
                finished.append(range_progress)
        return finished  # the Message objects go with this frame, while the collector is paused

    def reassign() -> None:
        consumer.assign([TopicPartition(p.split.topic, p.split.partition, p.position)
                         for p in progress.values() if not p.done])

    try:
        reassign()
        while True:
            open_ranges = [p for p in progress.values() if not p.done]
            if not open_ranges:
                break
            with cyclic_gc_paused():
                # ask for no more than the ranges still hold: consume() waits its whole timeout for
                # a count it cannot reach
                finished = take(consumer.consume(min(10000, sum(p.left for p in open_ranges)), 0.5))
            if finished and any(not p.done for p in progress.values()):
                # stop fetching what the finished ranges do not need
                consumer.pause([TopicPartition(p.split.topic, p.split.partition) for p in finished])
            for p in progress.values():
                if p.columns.count >= ROWS_PER_ARROW_BATCH:
                    yield p.columns.flush()
        for p in progress.values():
            if p.columns.count:
                yield p.columns.flush()
    finally:
        consumer.close()


def skip_deleted(consumer, progress: RangeProgress) -> None:
    """Records of the range were deleted (retention) before they were read: fail, or with
    failOnDataLoss=false go on from the partition's new start."""
    from confluent_kafka import TopicPartition

    from freshet.client.offsets import watermark_offsets

    split = progress.split
    low, _high = watermark_offsets(consumer, TopicPartition(split.topic, split.partition), 10)
    if split.fail_on_data_loss:
        raise RuntimeError(
            f"offsets {progress.position}..{low - 1} of {split.topic}-{split.partition} were deleted "
            "(retention) before they were read; set failOnDataLoss=false to skip them")
    progress.position = max(progress.position, low)


class _Common:
    def __init__(self, options: dict, schema: StructType) -> None:
        self.options = {k.lower(): v for k, v in options.items()}
        self.schema = schema
        self.bootstrap = _bootstrap(self.options)
        kind, subscription = parse_subscription(self.options)
        self.include_headers = _flag(self.options, "includeHeaders", False)
        self.fail_on_data_loss = _flag(self.options, "failOnDataLoss", True)
        self.consumer_options = {
            k[len("kafka."):]: v for k, v in self.options.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        # the driver's metadata and offset requests go with the same settings as the executors'
        # consumers (security.protocol, sasl.*, ssl.*), and a property librdkafka does not know is
        # refused here, before any task starts
        retries = self._whole("fetchOffset.numRetries", 3, "(0: never ask again)")
        interval_ms = self._whole("fetchOffset.retryIntervalMs", 1000, "of milliseconds")
        self.view = ClusterView(self.bootstrap, kind, subscription, client_options=self.consumer_options,
                                retries=retries, retry_interval_s=interval_ms / 1000)
        self.view.admin  # noqa: B018 (builds the client: librdkafka checks the properties)
        self.min_records = self._whole("minRecordsPerPartition", MIN_RECORDS_PER_PARTITION, "(0: never pack)")
        self.max_partitions = self._whole("maxPartitions", default_max_partitions(), "(0: no limit)")
        self.reader = choose_reader(self.options.get("reader", "auto"), self.consumer_options)

    def _whole(self, option: str, default: int, meaning: str) -> int:
        value = str(self.options.get(option.lower(), default)).strip()
        if not value.isdigit():
            raise SourceError(f"{option} must be a whole number {meaning}, got {value!r}")
        return int(value)

    def _ranges(self, start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> list:
        ranges = []
        for tp, until in sorted(end.items()):
            since = start.get(tp, 0)
            if until > since:
                ranges.append(TopicPartitionRange(tp[0], tp[1], since, until, self.bootstrap, self.include_headers,
                                                  self.fail_on_data_loss, self.consumer_options, self.reader))
        return pack_ranges(ranges, self.min_records, self.max_partitions)


READERS = ("auto", "columnar", "librdkafka")


def choose_reader(option: str, consumer_options: dict) -> str:
    """The ``reader`` option: ``columnar`` (Fetch requests decoded straight into Arrow; the default where it
    covers the settings: plaintext, and of the kafka.* options only those it knows), ``librdkafka`` (a
    confluent-kafka consumer per task: any security setting or librdkafka property), or ``auto``."""
    from freshet.client.columnar import covers

    option = str(option).lower()
    if option not in READERS:
        raise SourceError(f"option reader takes {', '.join(READERS)}; got {option!r}")
    if option == "librdkafka":
        return option
    problem = covers(consumer_options)
    if problem is None:
        return "columnar"
    if option == "columnar":
        raise SourceError(f"reader=columnar cannot serve this read: {problem}; use reader=librdkafka")
    return "librdkafka"


@dataclass
class RangePack(InputPartition):
    """Several short ranges read one after another by one Spark task."""

    ranges: list

    def __post_init__(self) -> None:
        super().__init__(None)


MIN_RECORDS_PER_PARTITION = 5000


def default_max_partitions() -> int:
    """The cores of this machine: what local mode runs at once. On a cluster, set maxPartitions
    (``freshet.spark.session.task_slots``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pack_ranges(ranges: list, min_records: int, max_partitions: int = 0) -> list:
    """Ranges of at least ``min_records`` stay one input partition each; the shorter ones are dealt
    into as many packs as hold ``min_records`` between them. Then, while there are more input
    partitions than ``max_partitions`` (0: no limit), they are dealt into that many packs. Dealing
    is longest first, to the lightest pack."""
    long = [r for r in ranges if r.end - r.start >= min_records] if min_records else list(ranges)
    short = [r for r in ranges if r.end - r.start < min_records] if min_records else []
    parts: list[list] = [[r] for r in long]
    if short:
        parts += deal([[r] for r in short], max(1, min(len(short), sum(r.end - r.start for r in short) // min_records)))
    if max_partitions and len(parts) > max_partitions:
        parts = deal(parts, max_partitions)
    return [RangePack(p) if len(p) > 1 else p[0] for p in parts]


def deal(groups: list[list], count: int) -> list[list]:
    """Groups of ranges dealt into ``count`` packs of about equal records: longest first, to the lightest."""
    def size(group):
        return sum(r.end - r.start for r in group)

    packs: list[list] = [[] for _ in range(count)]
    loads = [0] * count
    for group in sorted(groups, key=size, reverse=True):
        i = loads.index(min(loads))
        packs[i] += group
        loads[i] += size(group)
    return [p for p in packs if p]


def partition_ranges(partition) -> list[TopicPartitionRange]:
    """The ranges an input partition reads; none for the placeholder InputPartition(None) that Spark
    still runs one task with when there is nothing to read (an empty topic, or a start at the end)."""
    if isinstance(partition, RangePack):
        return partition.ranges
    if isinstance(partition, TopicPartitionRange):
        return [partition]
    return []


def read_partition(partition, schema: StructType):
    ranges = partition_ranges(partition)
    return read_ranges(ranges, schema) if ranges else iter(())


class FreshetStreamReader(_Common, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("freshet")``. Offsets are ``{"topic": {"partition": offset}}`` (Spark's Kafka
    source's form). Every method but ``read`` runs on the driver, in one long-lived Python process per query;
    ``read`` runs in executor workers on an unpickled copy, so it uses nothing the driver side set later."""

    def __init__(self, options: dict, schema: StructType) -> None:
        """Driver. Options are checked here, when the query is defined, not inside a task."""
        super().__init__(options, schema)
        if "endingoffsets" in self.options:
            raise SourceError("endingOffsets is for batch queries (spark.read); a stream reads on as records arrive")
        max_offsets = self.options.get("maxoffsetspertrigger")
        if max_offsets is not None and not (max_offsets.strip().isdigit() and int(max_offsets) > 0):
            raise SourceError(f"maxOffsetsPerTrigger must be a positive whole number, got {max_offsets!r}")
        self.max_offsets = int(max_offsets) if max_offsets is not None else None
        self.available_now_target: dict[tuple[str, int], int] | None = None
        # every partition's end offset as the last latestOffset found it, for the reportLatestOffset after it
        self.latest_seen: dict[tuple[str, int], int] | None = None

    def initialOffset(self) -> dict:
        """Driver, once for a new checkpoint: where the query starts (``startingOffsets``, default latest).

        >>> reader.initialOffset()
        {'access-logs': {'0': 0, '1': 0}}
        """
        partitions = self.view.partitions()
        return to_json(resolve(self.options.get("startingoffsets", "latest"), "latest", self.view, partitions,
                               "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        """Driver: ``ReadMaxRows(maxOffsetsPerTrigger)`` when that option is set, else all available."""
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def _latest(self, start: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        if self.available_now_target is not None:
            return dict(self.available_now_target)
        partitions = self.view.partitions()
        latest = self.latest_seen = self.view.offsets("latest", partitions, at_least=start)
        new = [tp for tp in partitions if tp not in start]
        if new:  # partitions created after the query started: read them from their beginning
            earliest = self.view.offsets("earliest", new)
            for tp in new:
                start[tp] = earliest[tp]
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Driver, before each microbatch: where it ends. From ``start`` (the previous end) up to each
        partition's end offset (its high watermark), capped by ``limit`` in proportion to what each
        partition has waiting; under Trigger.AvailableNow, no further than the end seen when it began.

        >>> reader.latestOffset({'t': {'0': 10}}, ReadMaxRows(100))
        {'t': {'0': 110}}
        """
        begin = from_json(start)
        latest = self._latest(begin)
        # a partition whose end lies below where the query stands (deleted and recreated, or records
        # lost) ends there: partitions() then fails or skips it per failOnDataLoss, as Spark's Kafka source
        end = {tp: latest.get(tp, off) for tp, off in begin.items()}
        for tp, off in latest.items():
            end.setdefault(tp, off)
        if isinstance(limit, ReadMaxRows):
            end = _cap(begin, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        """Driver, right after each latestOffset: every partition's end offset, for the query's progress report (how
        far behind it is). The ends that latestOffset has just asked for, as Spark's Kafka source reports the
        offsets its latestOffset fetched: asking the cluster again cost each microbatch a metadata and a
        ListOffsets request more. Asked anew only when latestOffset asked nothing (Trigger.AvailableNow)."""
        latest, self.latest_seen = self.latest_seen, None
        if latest is None:
            latest = self.view.offsets("latest", self.view.partitions())
        return to_json(latest)

    def prepareForTriggerAvailableNow(self) -> None:
        """Driver, once under Trigger.AvailableNow: fix the ends the run reads up to, then stop."""
        partitions = self.view.partitions()
        self.available_now_target = self.view.offsets("latest", partitions)

    def partitions(self, start: dict, end: dict) -> list:
        """Driver, for each microbatch: the tasks that read [start, end). Each is a ``TopicPartitionRange``,
        or a ``RangePack`` of short ranges read by one consumer; at most ``maxPartitions`` of them. A
        partition whose end went below ``start`` fails the query, or is skipped with failOnDataLoss=false.
        """
        begin = from_json(start)
        finish = from_json(end)
        for tp in finish:
            if tp not in begin:
                begin[tp] = self.view.offsets("earliest", [tp])[tp]
        for (topic, partition), until in sorted(finish.items()):
            if until < begin[(topic, partition)] and self.fail_on_data_loss:
                raise SourceError(
                    f"{topic}-{partition} now ends at offset {until}, below offset {begin[(topic, partition)]} where "
                    "this query stands: the topic was deleted and recreated, or records were lost. Set "
                    f"failOnDataLoss=false to go on from offset {until}, or start a new checkpoint")
        return self._ranges(begin, finish)  # ranges that went back are empty: skipped

    def read(self, partition: TopicPartitionRange | RangePack):
        """Executor: the records of one task's ranges as Arrow record batches (one confluent-kafka consumer,
        no group, every range assigned at once). Stateless: imports and clients are made here."""
        return read_partition(partition, self.schema)

    def commit(self, end: dict) -> None:
        """Driver, one batch late and never for the last: offsets live in Spark's checkpoint, so nothing is
        committed to the cluster (a consumer group's lag tools do not see a Spark query, as with Spark's
        own Kafka source)."""


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


DRIVER_MAX_ROWS = 100_000


class FreshetDriverStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readOnDriver=true``: each microbatch is read in the driver's long-lived Python process, in the same call
    that finds where it ends (PySpark's SimpleDataSourceStreamReader), and handed to Spark with the batch's plan;
    Spark keeps it in its block manager and the batch's tasks read it from there. No Python task runs in the
    executors for the source: measured with the live windowed count at 20k events/s, Spark's Python workers took
    0.12-0.22 CPU seconds a second for the source's tasks (~50 ms of CPU a microbatch, most of it PySpark's task
    machinery: the reading itself takes ~5 ms), the driver's reader 0.01. The cost: every record passes through
    the driver, and the batch's first stage reads it in one task. For live queries with small batches: at most
    ``maxOffsetsPerTrigger`` records a batch (default DRIVER_MAX_ROWS here). Offsets, checks and errors are the
    distributed reader's; a batch Spark asks again after a restart (its records no longer held) is read by one
    executor task."""

    def __init__(self, options: dict, schema: StructType) -> None:
        self.stream = FreshetStreamReader(options, schema)
        self.limit = ReadMaxRows(self.stream.max_offsets or DRIVER_MAX_ROWS)

    def initialOffset(self) -> dict:
        return self.stream.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.stream.prepareForTriggerAvailableNow()

    def read(self, start: dict):
        """Driver: the records from ``start`` up to where the next microbatch ends, read now, and that end."""
        end = self.stream.latestOffset(start, self.limit)
        return iter(list(self.readBetweenOffsets(start, end))), end  # a list's iterator: PySpark copies it

    def readBetweenOffsets(self, start: dict, end: dict):
        ranges = [r for part in self.stream.partitions(start, end) for r in partition_ranges(part)]
        return read_ranges(ranges, self.stream.schema) if ranges else iter(())

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint (see FreshetStreamReader.commit)."""


class FreshetBatchReader(_Common, DataSourceReader):
    """``spark.read.format("freshet")``: [startingOffsets (earliest), endingOffsets (latest)) once."""

    def partitions(self) -> list:
        """Driver: the tasks of the read, as for a stream's microbatch."""
        partitions = self.view.partitions()
        start = resolve(self.options.get("startingoffsets", "earliest"), "earliest", self.view, partitions,
                        "startingOffsets", refuse="latest")
        end = resolve(self.options.get("endingoffsets", "latest"), "latest", self.view, partitions,
                      "endingOffsets", refuse="earliest")
        for tp in partitions:
            if end[tp] < start[tp]:
                raise SourceError(f"startingOffsets {start[tp]} for {tp[0]}-{tp[1]} is after the end of the read "
                                  f"({end[tp]}, from endingOffsets)")
        return self._ranges(start, end)

    def read(self, partition: TopicPartitionRange | RangePack):
        """Executor: as ``FreshetStreamReader.read``."""
        return read_partition(partition, self.schema)


class FreshetDataSource(DataSource):
    """The ``freshet`` format: read and write Kafka-protocol topics (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "freshet"

    def _option(self, name: str, default: bool) -> bool:
        """A true/false option, named in any case (Spark's options are case-insensitive)."""
        return _flag({k.lower(): v for k, v in self.options.items()}, name, default)

    def schema(self) -> StructType:
        return source_schema(self._option("includeHeaders", False))

    def streamReader(self, schema: StructType) -> FreshetStreamReader:
        if self._option("readOnDriver", False):
            # PySpark then asks simpleStreamReader (its only way to choose one)
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})
        return FreshetStreamReader(dict(self.options), schema)

    def simpleStreamReader(self, schema: StructType) -> FreshetDriverStreamReader:
        return FreshetDriverStreamReader(dict(self.options), schema)

    def reader(self, schema: StructType) -> FreshetBatchReader:
        return FreshetBatchReader(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import FreshetStreamWriter

        return FreshetStreamWriter(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import FreshetBatchWriter

        return FreshetBatchWriter(dict(self.options), schema)


__all__ = ["FreshetDataSource", "Offsets", "SourceError", "source_schema"]

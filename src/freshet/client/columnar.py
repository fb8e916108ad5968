"""Offset ranges of Kafka partitions read straight into Arrow columns: the Spark source's reader.

A librdkafka consumer hands Python one Message object per record, which costs more than everything
else a replay does. This reader is a small Kafka client of its own for one job: read the records of
known ranges ``[start, end)`` of partitions, once, with no consumer group. It sends Fetch requests to
each partition's leader (found with Metadata), and a C decoder (``_recordset``) appends the records of
the record batches it gets to Arrow buffers: key, value, offset, timestamp, timestamp type and headers,
no Python object per record. Python looks at each batch only when it needs a decision: compressed
batches (gzip, snappy, lz4, zstd; decompressed with cramjam), control batches, and under
``read_committed`` the batches of aborted transactions, skipped as a Java consumer skips them (the
fetch response's aborted-transaction list, closed by each producer's abort marker).

It covers a plaintext connection (``security.protocol`` PLAINTEXT) and the settings in
``COVERED_OPTIONS``; anything else (SASL, TLS, librdkafka tuning) is for the librdkafka path, which
``covers`` tells the caller.

    reader = RangeReader("127.0.0.1:9092", [ReadRange("clicks", 0, 0, 1000)], arrow_schema)
    for batch in reader.batches():   # pyarrow.RecordBatch, one range's records each
        ...
"""

from __future__ import annotations

import heapq
import io
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11 import request as fetch_request
from kio.schema.fetch.v11 import response as fetch_response
from kio.schema.list_offsets.v5 import request as list_offsets_request
from kio.schema.list_offsets.v5 import response as list_offsets_response
from kio.schema.metadata.v8 import request as metadata_request
from kio.schema.metadata.v8 import response as metadata_response
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32, i64

from freshet.format.compression import decompress
from freshet.format.control import ABORT, marker_type
from freshet.format.errors import FormatError, InvalidBatchError
from freshet.format.framing import SIZE, read_response_header, request_header, size_prefixed
from freshet.format.record_batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    read_header,
)

# kafka.* options this reader honours (librdkafka's names); any other sends a read to librdkafka
COVERED_OPTIONS = frozenset({
    "isolation.level", "client.id", "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.wait.max.ms",
    "socket.timeout.ms", "security.protocol",
})
ROWS_PER_ARROW_BATCH = 65536
BYTES_PER_ARROW_BATCH = 64 << 20
# a range that gets no further for this long fails its task (an open transaction holds the last stable
# offset below the range's end at most transaction.max.timeout.ms, 15 minutes by default)
STALL_TIMEOUT_S = 900.0
LATEST, EARLIEST = -1, -2  # ListOffsets timestamps: the end, the start

_RETRIABLE = {
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
    ErrorCode.request_timed_out, ErrorCode.not_coordinator, ErrorCode.offset_not_available,
}


class ReadError(RuntimeError):
    """A range cannot be read: the broker refused, the records are gone, or they do not decode."""


class _Moved(ReadError):
    """A retriable refusal of a request to a partition's leader (it moved, or a new one does not know its high
    watermark yet: OFFSET_NOT_AVAILABLE): asked again, the metadata refreshed."""


class ColumnarUnavailable(Exception):
    """The settings ask for something this reader does not do (the caller uses librdkafka instead)."""


def decoder():
    """The C record-batch decoder's module, or ColumnarUnavailable when it was not built."""
    try:
        from . import _recordset
    except ImportError as exc:  # an install without a C compiler
        raise ColumnarUnavailable(f"the record-batch decoder was not built ({exc})") from None
    return _recordset


def covers(options: dict) -> str | None:
    """None when this reader can serve a read with these kafka.* options (librdkafka's names, without
    the ``kafka.`` prefix), else why not."""
    try:
        decoder()
    except ColumnarUnavailable as exc:
        return str(exc)
    for key, value in options.items():
        if key not in COVERED_OPTIONS:
            return f"kafka.{key} is a librdkafka setting"
        if key == "security.protocol" and str(value).lower() != "plaintext":
            return f"security.protocol {value} (the columnar reader speaks plaintext only)"
        if key == "isolation.level" and str(value).lower() not in ("read_committed", "read_uncommitted"):
            return f"isolation.level {value!r} is neither read_committed nor read_uncommitted"
    return None


@dataclass(frozen=True)
class ReadRange:
    """Offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


class BrokerConnection:
    """One blocking connection to a broker: a request, then its response (kio entities)."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ReadError(f"cannot reach the broker at {self.address}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id.encode()
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, entity, response_type):
        self.correlation_id += 1
        header = request_header(entity.__api_key__, entity.__version__, self.correlation_id, self.client_id,
                                type(entity).__flexible__)
        try:
            self.sock.sendall(size_prefixed(header + _encode(entity)))
            (size,) = SIZE.unpack(self._read_exactly(SIZE.size))
            frame = self._read_exactly(size)
        except (TimeoutError, OSError) as exc:
            raise ReadError(f"lost the connection to {self.address}: {exc}") from None
        try:
            correlation_id, pos = read_response_header(frame, entity.__api_key__, response_type.__flexible__)
        except FormatError as exc:
            raise ReadError(f"{self.address} answered with a frame that does not parse: {exc}") from None
        if correlation_id != self.correlation_id:
            raise ReadError(f"{self.address} answered request {correlation_id}, expected {self.correlation_id}")
        result = entity_reader(response_type)(frame, pos)
        return result[0] if isinstance(result, tuple) else result.value

    def _read_exactly(self, n: int) -> memoryview:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            chunk = self.sock.recv_into(view[got:], n - got)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            got += chunk
        return view.toreadonly()


def _encode(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


class _Position:
    """Where the reading of one range stands, and its columns so far."""

    def __init__(self, read_range: ReadRange, columns) -> None:
        self.range = read_range
        self.offset = read_range.start
        self.columns = columns
        self.max_bytes = 0
        self.last_progress = time.monotonic()

    @property
    def done(self) -> bool:
        return self.offset >= self.range.end


class RangeReader:
    """Reads ``ranges`` (distinct topic-partitions) with Fetch requests to their leaders; ``batches()``
    yields pyarrow RecordBatches in ``arrow_schema`` (key, value, topic, partition, offset, timestamp,
    timestampType[, headers]), each holding records of one range in offset order."""

    def __init__(self, bootstrap: str, ranges: list[ReadRange], arrow_schema, *, options: dict | None = None,
                 fail_on_data_loss: bool = True) -> None:
        options = dict(options or {})
        problem = covers(options)
        if problem:
            raise ColumnarUnavailable(problem)
        self.bootstrap = [_host_port(a) for a in bootstrap.split(",") if a.strip()]
        self.ranges = ranges
        self.arrow_schema = arrow_schema
        self.with_headers = arrow_schema is not None and "headers" in arrow_schema.names  # None: records()
        self.fail_on_data_loss = fail_on_data_loss
        self.read_committed = str(options.get("isolation.level", "read_committed")).lower() == "read_committed"
        self.client_id = str(options.get("client.id", "freshet-columnar"))
        self.max_bytes = int(options.get("fetch.max.bytes", 64 << 20))
        self.partition_max_bytes = int(options.get("max.partition.fetch.bytes", 4 << 20))
        self.max_wait_ms = int(options.get("fetch.wait.max.ms", 500))
        self.timeout = int(options.get("socket.timeout.ms", 60_000)) / 1000
        self.connections: dict[tuple[str, int], BrokerConnection] = {}
        self.leaders: dict[tuple[str, int], tuple[str, int]] = {}

    # -- the read

    def batches(self):
        import pyarrow as pa  # noqa: F401 (fails early where the spark extra is missing)

        for read_range, taken in self._chunks():
            yield self._record_batch(read_range, taken)

    def records(self):
        """The records without pyarrow: per chunk of one range, ``Records`` (Python lists)."""
        for read_range, taken in self._chunks():
            yield Records.of(read_range, taken)

    def end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where each partition ends for this reader: its last stable offset under read_committed (the
        first offset of a transaction still open), else its high watermark."""
        self._find_leaders([ReadRange(t, p, 0, 0) for t, p in partitions])
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for tp in partitions:
            by_leader.setdefault(self.leaders[tp], []).append(tp)
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    return {tp: offset for leader, tps in by_leader.items()
                            for tp, offset in self._list_offsets(leader, tps, LATEST, "end").items()}
                except _Moved:  # as librdkafka: asked again, of the leaders the metadata names now
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
                    self._find_leaders([ReadRange(t, p, 0, 0) for t, p in partitions])
                    by_leader = {}
                    for tp in partitions:
                        by_leader.setdefault(self.leaders[tp], []).append(tp)
        finally:
            self._close()

    def _list_offsets(self, leader: tuple[str, int], partitions: list[tuple[str, int]], timestamp: int,
                      what: str) -> dict[tuple[str, int], int]:
        """One ListOffsets request to ``leader`` (timestamp -1: the end, -2: the start); ReadError names
        ``what`` was being listed when the broker refuses a partition."""
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        request = list_offsets_request.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(1 if self.read_committed else 0),
            topics=tuple(list_offsets_request.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
                list_offsets_request.ListOffsetsPartition(partition_index=i32(p), timestamp=i64(timestamp))
                for p in ps)) for t, ps in topics.items()))
        response = self._connection(leader).request(request, list_offsets_response.ListOffsetsResponse)
        offsets = {}
        for topic in response.topics:
            for part in topic.partitions:
                if part.error_code != ErrorCode.none:
                    raise (_Moved if part.error_code in _RETRIABLE else ReadError)(
                        f"listing the {what} of {topic.name}-{part.partition_index}: {part.error_code.name}")
                offsets[(topic.name, part.partition_index)] = int(part.offset)
        return offsets

    def _close(self) -> None:
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    def _chunks(self):
        """(range, the decoder's buffers) per chunk of records of one range, in offset order per range."""
        columns_type = decoder().Columns
        positions = [_Position(r, columns_type(headers=self.with_headers)) for r in self.ranges if r.end > r.start]
        try:
            self._find_leaders([p.range for p in positions])
            while True:
                open_positions = [p for p in positions if not p.done]
                if not open_positions:
                    break
                by_leader: dict[tuple[str, int], list[_Position]] = {}
                for p in open_positions:
                    by_leader.setdefault(self.leaders[(p.range.topic, p.range.partition)], []).append(p)
                stale = False
                for leader, group in by_leader.items():
                    stale |= self._fetch(leader, group)
                if stale:
                    time.sleep(0.1)
                    self._find_leaders([p.range for p in positions if not p.done])
                for p in positions:
                    if p.columns.count >= ROWS_PER_ARROW_BATCH or p.columns.nbytes >= BYTES_PER_ARROW_BATCH or (
                            p.done and p.columns.count):
                        yield p.range, p.columns.take()
                    elif not p.done and time.monotonic() - p.last_progress > STALL_TIMEOUT_S:
                        raise ReadError(f"{p.range.topic}-{p.range.partition} got no further than offset {p.offset} "
                                        f"in {STALL_TIMEOUT_S:.0f} s (range ends at {p.range.end})")
        finally:
            self._close()

    def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self.connections.get(address)
        if connection is None:
            connection = self.connections[address] = BrokerConnection(*address, self.timeout, self.client_id)
        return connection

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self.connections.pop(address, None)
        if connection is not None:
            connection.close()

    def _find_leaders(self, ranges: list[ReadRange]) -> None:
        topics = sorted({r.topic for r in ranges})
        request = metadata_request.MetadataRequest(
            topics=tuple(metadata_request.MetadataRequestTopic(name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        last_error = None
        for address in self.bootstrap + [a for a in self.connections if a not in self.bootstrap]:
            try:
                response = self._connection(address).request(request, metadata_response.MetadataResponse)
                break
            except ReadError as exc:
                self._drop(address)
                last_error = exc
        else:
            raise ReadError(f"no broker answered a metadata request: {last_error}")
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none and topic.error_code not in _RETRIABLE:
                raise ReadError(f"reading {topic.name}: {topic.error_code.name}")
            for partition in topic.partitions:
                if partition.leader_id in brokers:
                    self.leaders[(topic.name, partition.partition_index)] = brokers[partition.leader_id]
        missing = [r for r in ranges if (r.topic, r.partition) not in self.leaders]
        if missing:
            r = missing[0]
            raise ReadError(f"{r.topic}-{r.partition} has no leader (no such topic or partition?)")

    def _fetch(self, leader: tuple[str, int], group: list[_Position]) -> bool:
        """One Fetch for the group's partitions; True when a leader moved (metadata to refresh)."""
        by_key = {(p.range.topic, p.range.partition): p for p in group}
        topics: dict[str, list] = {}
        for p in group:
            topics.setdefault(p.range.topic, []).append(fetch_request.FetchPartition(
                partition=i32(p.range.partition), fetch_offset=i64(p.offset),
                partition_max_bytes=i32(p.max_bytes or self.partition_max_bytes)))
        request = fetch_request.FetchRequest(
            max_wait=timedelta(milliseconds=self.max_wait_ms), min_bytes=i32(1), max_bytes=i32(self.max_bytes),
            isolation_level=i8(1 if self.read_committed else 0),
            topics=tuple(fetch_request.FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()),
            forgotten_topics_data=())
        try:
            response = self._connection(leader).request(request, fetch_response.FetchResponse)
        except ReadError:
            self._drop(leader)
            return True
        if response.error_code != ErrorCode.none:
            if response.error_code in _RETRIABLE:
                return True
            raise ReadError(f"fetch from {leader[0]}:{leader[1]}: {response.error_code.name}")
        stale = False
        for topic in response.responses:
            for part in topic.partitions:
                position = by_key.get((topic.topic, part.partition_index))
                if position is None:
                    continue
                if part.error_code == ErrorCode.none:
                    self._take(position, part)
                elif part.error_code == ErrorCode.offset_out_of_range:
                    self._skip_deleted(leader, position)
                elif part.error_code in _RETRIABLE:
                    stale = True
                else:
                    raise ReadError(f"reading {topic.topic}-{part.partition_index} at offset {position.offset}: "
                                    f"{part.error_code.name}")
        return stale

    def _take(self, position: _Position, part) -> None:
        records = part.records
        before = position.offset
        if records:
            aborted = None
            if self.read_committed and part.aborted_transactions:
                aborted = _AbortedTransactions(part.aborted_transactions)
            self._decode(position, records, aborted)
        if position.offset > before:
            position.last_progress = time.monotonic()
            position.max_bytes = 0
        elif records and len(records) >= (position.max_bytes or self.partition_max_bytes):
            # only part of a batch bigger than the partition's share came: ask for more next time
            position.max_bytes = min(2 * (position.max_bytes or self.partition_max_bytes), self.max_bytes)

    def _decode(self, position: _Position, records: bytes, aborted) -> None:
        columns = position.columns
        end = position.range.end
        pos = 0
        size_left = len(records)
        while position.offset < end:
            if aborted is None:
                try:
                    pos, next_offset = columns.add_batches(records, pos, position.offset, end)
                except ValueError as exc:
                    raise ReadError(f"{position.range.topic}-{position.range.partition}: {exc}") from None
                position.offset = max(position.offset, next_offset)
                if position.offset >= end:
                    return
            if size_left - pos < HEADER_SIZE:
                return
            batch = read_header(records, pos)
            base_offset, attributes = batch.base_offset, batch.attributes
            batch_end = pos + batch.size
            if batch.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                raise ReadError(f"corrupt record batch at offset {base_offset} of "
                                f"{position.range.topic}-{position.range.partition}")
            if batch_end > size_left:
                return  # a partial batch ends the fetch
            if batch.magic != MAGIC:
                raise ReadError(f"{position.range.topic}-{position.range.partition} holds message format "
                                f"v{batch.magic} at offset {base_offset}; the columnar reader reads v2 (Kafka 0.11+) "
                                "only")
            last_offset = batch.last_offset
            skip = False
            if aborted is not None:
                aborted.reach(last_offset)
                if attributes & CONTROL_FLAG:  # a control batch: its marker closes the producer's transaction
                    if batch.records_count and _is_abort_marker(records, pos, batch_end):
                        aborted.close(batch.producer_id)
                    skip = True
                elif attributes & TRANSACTIONAL_FLAG and batch.producer_id in aborted.producers:
                    skip = True
            elif attributes & CONTROL_FLAG:
                skip = True
            if not skip and last_offset >= position.offset:
                payload = _payload(records, pos, batch_end, attributes & COMPRESSION_MASK, base_offset)
                try:
                    columns.add_records(payload, batch.records_count, base_offset, batch.base_timestamp,
                                        batch.max_timestamp if attributes & TIMESTAMP_TYPE_FLAG else -1,
                                        position.offset, end)
                except ValueError as exc:
                    raise ReadError(f"{position.range.topic}-{position.range.partition}: {exc}") from None
            pos = batch_end
            position.offset = max(position.offset, last_offset + 1)

    def _skip_deleted(self, leader: tuple[str, int], position: _Position) -> None:
        """The range's next records were deleted (retention) before they were read: fail, or with
        failOnDataLoss=false go on from the partition's new start."""
        r = position.range
        low = self._list_offsets(leader, [(r.topic, r.partition)], EARLIEST, "start")[(r.topic, r.partition)]
        if low <= position.offset:
            raise ReadError(f"offset {position.offset} of {r.topic}-{r.partition} is past its end")
        if self.fail_on_data_loss:
            raise ReadError(f"offsets {position.offset}..{low - 1} of {r.topic}-{r.partition} were deleted "
                            "(retention) before they were read; set failOnDataLoss=false to skip them")
        position.offset = min(low, r.end)
        position.last_progress = time.monotonic()

    # -- Arrow

    def _record_batch(self, read_range: ReadRange, taken: dict):
        import pyarrow as pa

        n = taken["count"]
        schema = self.arrow_schema
        columns = [
            _binary(taken["keys"], n, pa.binary()), _binary(taken["values"], n, pa.binary()),
            pa.repeat(pa.scalar(read_range.topic, pa.string()), n),
            pa.repeat(pa.scalar(read_range.partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(taken["offsets"])]),
            pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(taken["timestamps"])]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(taken["timestamp_types"])]),
        ]
        if self.with_headers:
            header_keys = _utf8_keys(_binary(taken["header_keys"], None, pa.string()))
            header_values = _binary(taken["header_values"], None, pa.binary())
            header_type = schema.field("headers").type
            entries = pa.StructArray.from_arrays([header_keys, header_values], fields=list(header_type.value_type))
            columns.append(pa.ListArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(taken["header_offsets"])]), entries,
                type=header_type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


@dataclass
class Records:
    """A chunk of one range's records as Python lists (None for a null key or value), in offset order."""

    topic: str
    partition: int
    offsets: list[int]
    timestamps_ms: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]

    @classmethod
    def of(cls, read_range: ReadRange, taken: dict) -> Records:
        n = taken["count"]
        return cls(read_range.topic, read_range.partition, memoryview(taken["offsets"]).cast("q").tolist(),
                   [us // 1000 for us in memoryview(taken["timestamps"]).cast("q").tolist()],
                   _python_binary(taken["keys"], n), _python_binary(taken["values"], n))


def _python_binary(parts: tuple, n: int) -> list[bytes | None]:
    offsets, data, validity, nulls = parts
    ends = memoryview(offsets).cast("i").tolist()
    values = [data[ends[i]:ends[i + 1]] for i in range(n)]
    if nulls:
        for i in range(n):
            if not validity[i >> 3] & (1 << (i & 7)):
                values[i] = None
    return values


def _binary(parts: tuple, n: int | None, arrow_type):
    import pyarrow as pa

    offsets, data, validity, nulls = parts
    count = len(offsets) // 4 - 1 if n is None else n
    return pa.Array.from_buffers(arrow_type, count, [pa.py_buffer(validity) if validity is not None else None,
                                                     pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _utf8_keys(keys):
    """Header keys as Kafka's Java client reads them: UTF-8, each bad sequence read as U+FFFD (a producer may
    write any bytes there). Valid keys, the usual case, are checked in C and kept as they are."""
    import pyarrow as pa

    try:
        keys.validate(full=True)
        return keys
    except pa.ArrowInvalid:
        raw = keys.cast(pa.binary())
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in raw.to_pylist()], pa.string())


class _AbortedTransactions:
    """A fetch's aborted transactions, as a Java consumer keeps them: a producer's batches are skipped from
    the first offset of its aborted transaction until its abort marker."""

    def __init__(self, listed) -> None:
        self.pending = [(int(t.first_offset), int(t.producer_id)) for t in listed]
        heapq.heapify(self.pending)
        self.producers: set[int] = set()

    def reach(self, last_offset: int) -> None:
        while self.pending and self.pending[0][0] <= last_offset:
            self.producers.add(heapq.heappop(self.pending)[1])

    def close(self, producer_id: int) -> None:
        self.producers.discard(producer_id)


def _is_abort_marker(records: bytes, start: int, end: int) -> bool:
    """Whether the control batch at ``records[start:end]`` is an abort marker (a control batch without a
    control record is none)."""
    try:
        return marker_type(memoryview(records)[start:end]) == ABORT
    except InvalidBatchError:
        return False
    except ValueError as exc:  # a FormatError, or a header key that is not UTF-8
        raise ReadError(f"corrupt control record: {exc}") from None


def _payload(records: bytes, start: int, end: int, codec: int, base_offset: int):
    """The records section of the batch at ``records[start:end]``, decompressed."""
    try:
        return decompress(codec, memoryview(records)[start + HEADER_SIZE:end])
    except ValueError as exc:
        raise ReadError(f"the record batch at offset {base_offset} does not decompress: {exc}") from None


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ReadError(f"bad bootstrap address {address!r} (want host:port)")
    return host.strip("[]"), int(port)

"""Kafka record batches (magic v2), as stored on disk and sent on the wire.

The log stores batches exactly as producers sent them. Only the 61-byte batch header is read
on the hot path; offsets are assigned by patching the header's base offset (the CRC-32C covers
the bytes from ``attributes`` on, so that patch keeps the batch valid).

Layout of the header (big-endian)::

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 | magic int8 |
    crc uint32 | attributes int16 | last_offset_delta int32 | base_timestamp int64 |
    max_timestamp int64 | producer_id int64 | producer_epoch int16 | base_sequence int32 |
    records_count int32
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import crc32c

from .compression import compress, decompress
from .errors import CorruptBatchError, CorruptPayloadError, InvalidBatchError, MalformedRecordError
from .varint import read_varint, write_varint

try:
    from . import _scan  # the record walk in C (setup.py builds it at install)
except ImportError:  # an install without a C compiler: the walk in Python below
    _scan = None

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes batch_length does not count
CRC_START = 21  # first byte covered by the CRC (attributes)
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")


class BatchHeader(NamedTuple):
    """The fixed header of one record batch, and where it lies in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. The caller makes sure 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def validate_batches(buf: bytes | memoryview) -> list[BatchHeader]:
    """Check every batch in a produce request's records: length, magic, CRC-32C, counts (the records inside are
    scan_records' to check).

    Returns the headers in order. Raises CorruptBatchError or InvalidBatchError (freshet.format.errors) and
    nothing else; a failing buffer is refused whole.
    """
    headers: list[BatchHeader] = []
    pos, end = 0, len(buf)
    if end == 0:
        raise CorruptBatchError("empty record set")
    view = memoryview(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptBatchError(f"truncated batch header at byte {pos}")
        header = read_header(view, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            raise CorruptBatchError(f"batch length {header.batch_length} at byte {pos} does not fit")
        if header.magic != MAGIC:
            raise InvalidBatchError(f"record batch magic {header.magic}; only magic 2 is accepted")
        if crc32c.crc32c(view[pos + CRC_START : pos + size]) != header.crc:
            raise CorruptBatchError(f"CRC-32C mismatch in batch at byte {pos}")
        if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
            raise InvalidBatchError(
                f"batch claims {header.records_count} records with last offset delta "
                f"{header.last_offset_delta}"
            )
        headers.append(header)
        pos += size
    return headers


def scan_valid_prefix(buf: bytes | memoryview, check_crc: bool = True) -> tuple[list[tuple[int, BatchHeader]], int]:
    """Walk the batches of a segment's bytes; stop at the first torn or corrupt one.

    Returns ``([(position, header), ...], valid_bytes)``: everything past ``valid_bytes`` is
    a torn tail (a crash mid-write) or garbage.
    """
    view = memoryview(buf)
    pos, end = 0, len(buf)
    found: list[tuple[int, BatchHeader]] = []
    previous_last = None
    while end - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break
        if header.magic != MAGIC:
            break
        if check_crc and crc32c.crc32c(view[pos + CRC_START : pos + size]) != header.crc:
            break
        if previous_last is not None and header.base_offset <= previous_last:
            break
        found.append((pos, header))
        previous_last = header.last_offset
        pos += size
    return found, pos


def with_base_offset(batch: bytes | memoryview, base_offset: int, leader_epoch: int = 0) -> bytearray:
    """A copy of ``batch`` with its base offset and partition leader epoch set (CRC unaffected)."""
    out = bytearray(batch)
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    _LEADER_EPOCH.pack_into(out, 12, leader_epoch)
    return out


_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP_AT = 35  # base_offset 8, length 4, epoch 4, magic 1, crc 4, attributes 2, last delta 4, base ts 8
_CRC = struct.Struct(">I")


def stamp_log_append_time(buf: bytearray, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``buf[pos:]`` as carrying log-append time ``timestamp_ms`` (the attributes' timestamp-type
    bit and the max timestamp, which consumers then give every record) and recompute its CRC, in place."""
    (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + CRC_START)
    _ATTRIBUTES.pack_into(buf, pos + CRC_START, attributes | TIMESTAMP_TYPE_FLAG)
    set_max_timestamp(buf, pos, timestamp_ms)


def set_max_timestamp(buf: bytearray, pos: int, timestamp_ms: int) -> None:
    """Set the max timestamp of the batch at ``buf[pos:]`` and recompute its CRC, in place (Kafka's
    setMaxTimestamp: the leader writes the largest of the records' timestamps whatever the producer put there)."""
    struct.pack_into(">q", buf, pos + _MAX_TIMESTAMP_AT, timestamp_ms)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    _CRC.pack_into(buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + CRC_START:pos + LOG_OVERHEAD + length]))


# ---------------------------------------------------------------------------------------
# Records inside a batch. decode_records builds them (the timestamp lookup, compaction, tests); scan_records only
# walks them, on the produce path, where every produced batch's records are checked.


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    # header keys as Kafka's String of their bytes, but lossless: bytes that are not UTF-8 come back as lone
    # surrogates (Python's surrogateescape) and encode_batch writes them back as the same bytes; Kafka accepts
    # such keys (its decoder replaces them), so the broker stores and compacts them as sent
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def encode_batch(
    records: list[tuple[bytes | None, bytes | None, int]] | list[tuple[bytes | None, bytes | None, int, tuple]],
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    offset_deltas: list[int] | None = None,
    log_append_time: int | None = None,
) -> bytes:
    """Build an uncompressed v2 batch from ``(key, value, timestamp_ms[, headers])`` tuples.

    ``offset_deltas`` keeps the offsets of records a compaction left behind (gaps allowed);
    ``log_append_time`` marks the batch as stamped by the broker at that time (a compacted copy keeps it).
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    deltas = offset_deltas if offset_deltas is not None else list(range(len(records)))
    base_ts = records[0][2]
    max_ts = max(r[2] for r in records) if log_append_time is None else log_append_time
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_FLAG
    body = bytearray()
    for delta, rec in zip(deltas, records):
        key, value, ts = rec[0], rec[1], rec[2]
        headers = rec[3] if len(rec) > 3 else ()
        r = bytearray()
        r.append(0)
        write_varint(r, ts - base_ts)
        write_varint(r, delta)
        _write_bytes(r, key)
        _write_bytes(r, value)
        write_varint(r, len(headers))
        for hk, hv in headers:
            _write_bytes(r, hk.encode("utf-8", "surrogateescape"))
            _write_bytes(r, hv)
        write_varint(body, len(r))
        body += r
    after_crc = struct.pack(
        ">hiqqqhii", attributes, deltas[-1], base_ts, max_ts, producer_id,
        producer_epoch, base_sequence, len(records),
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiiBI", base_offset, batch_length, 0, MAGIC, crc) + after_crc


def _records_payload(batch: bytes | memoryview, header: BatchHeader, limit: int | None = None) -> bytes | memoryview:
    """The records section of a batch, decompressed (gzip, snappy, lz4 frame, zstd); ``limit``: decompress's."""
    payload = memoryview(batch)[HEADER_SIZE : header.size]
    try:
        out = decompress(header.compression, payload, limit)
    except CorruptPayloadError as exc:
        raise CorruptPayloadError(f"batch does not decompress: {exc}") from None
    return out if isinstance(out, (bytes, bytearray, memoryview)) else memoryview(out)


def recompress(batch: bytes | memoryview, header: BatchHeader, codec: int) -> bytes:
    """``batch`` with its records section in ``codec`` (a topic's compression.type): same records, offsets,
    timestamps, producer fields; new length, attributes and CRC."""
    body = compress(codec, _records_payload(batch, header))
    after_crc = struct.pack(
        ">hiqqqhii", (header.attributes & ~COMPRESSION_MASK) | codec, header.last_offset_delta, header.base_timestamp,
        header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence, header.records_count,
    ) + body
    return struct.pack(">qiiBI", header.base_offset, 4 + 1 + 4 + len(after_crc), header.partition_leader_epoch, MAGIC,
                       crc32c.crc32c(after_crc)) + after_crc


def decode_records(batch: bytes | memoryview) -> Iterator[Record]:
    """Yield the records of one batch, decompressed with its codec. Records that do not hold together raise
    CorruptBatchError (a format error: a client's batch answered CORRUPT_MESSAGE), never anything else."""
    header = read_header(batch)
    payload = _records_payload(batch, header)
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        klen, pos = read_varint(payload, pos)
        key = None if klen < 0 else bytes(payload[pos : pos + klen])
        pos += max(klen, 0)
        vlen, pos = read_varint(payload, pos)
        value = None if vlen < 0 else bytes(payload[pos : pos + vlen])
        pos += max(vlen, 0)
        nheaders, pos = read_varint(payload, pos)
        hdrs = []
        for _h in range(nheaders):
            hklen, pos = read_varint(payload, pos)
            if hklen < 0:
                raise CorruptBatchError(f"record header key of negative size {hklen}")
            hk = bytes(payload[pos : pos + hklen]).decode("utf-8", "surrogateescape")
            pos += hklen
            hvlen, pos = read_varint(payload, pos)
            hv = None if hvlen < 0 else bytes(payload[pos : pos + hvlen])
            pos += max(hvlen, 0)
            hdrs.append((hk, hv))
        if pos != end:
            raise CorruptBatchError("record length does not match its fields")
        timestamp = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_FLAG else header.base_timestamp + ts_delta
        yield Record(header.base_offset + off_delta, timestamp, key, value, tuple(hdrs))


def iter_batches(buf: bytes | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, batch bytes)`` for each whole batch in ``buf``."""
    view = memoryview(buf)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        if pos + header.size > len(view):
            return
        yield header, view[pos : pos + header.size]
        pos += header.size


class RecordScan(NamedTuple):
    """What the produce path checks in one batch, read without building records: how many records it holds, the
    index in the batch of each record without a key, (when asked) each record's timestamp as decode_records gives
    it, and the largest of its records' timestamps (what the header's max timestamp must say)."""

    count: int
    keyless: list[int]
    timestamps: list[int] | None
    max_timestamp: int


_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))  # a one-byte varint's value (most of a record's)


def scan_records(batch: bytes | memoryview, timestamps: bool = False, header: BatchHeader | None = None,
                 limit: int | None = None) -> RecordScan:
    """Walk the records of one batch (decompressed with its codec) field by field, keys, values and headers skipped
    by their lengths, nothing built per record, and check their structure as Kafka's leader does before it stores a
    produced batch: every length within the batch and its record, no field of negative size but a null key or
    value (-1), a header count that fits, offset deltas 0, 1, 2, ... (the header's last offset delta is checked
    against the count by validate_batches), exactly ``records_count`` records and no byte after them.

    Raises MalformedRecordError (with the record's index) for records that do not hold together, CorruptPayloadError
    for a records section that does not decompress. The broker runs it on every produced batch, in C
    (freshet.format._scan) where it was built; ``header``: the batch's, when the caller has read it."""
    if header is None:
        header = read_header(batch)
    if header.attributes & COMPRESSION_MASK:
        frame = memoryview(batch)[HEADER_SIZE:HEADER_SIZE + 5]
        if header.compression == 3 and frame[:4] == b"\x04\x22\x4d\x18" and len(frame) == 5 and not frame[4] & 0x20:
            # Kafka's LZ4 reader refuses a frame of linked blocks ("Dependent block stream is unsupported"): its
            # Java consumers could not read the batch
            raise MalformedRecordError("an lz4 frame of linked blocks: Kafka reads only independent blocks")
        data = _records_payload(batch, header, limit)
    else:
        data = memoryview(batch)[HEADER_SIZE:header.size]
    if _scan is not None:
        try:
            walked = _scan.check(data, header.records_count, timestamps)
        except ValueError as exc:
            raise MalformedRecordError(*exc.args) from None
        if walked is not None:  # None: a varint past 64 bits, left to the walk in Python
            keyless, deltas, max_delta = walked
            return _scanned(header, keyless, deltas, max_delta)
    return _walk(data, header, timestamps)


def scan_batches(records: bytes | memoryview, headers: list[BatchHeader], timestamps: bool = False,
                 limit: int | None = None) -> list[RecordScan]:
    """scan_records over every batch of a produce request's records (``headers``: validate_batches' answer), the
    uncompressed ones handed to the C walk in place (a produce of small batches pays ~1 us a batch for it all);
    ``limit``: the most a compressed batch's records may decompress to (PayloadTooLargeError)."""
    view = memoryview(records)
    check = _scan.check if _scan is not None else None
    scans = []
    pos = 0
    for header in headers:
        end = pos + header.size
        walked = None
        if check is not None and not header.attributes & COMPRESSION_MASK:
            try:
                walked = check(view[pos + HEADER_SIZE:end], header.records_count, timestamps)
            except ValueError as exc:
                raise MalformedRecordError(*exc.args) from None
        scans.append(_scanned(header, *walked) if walked is not None else
                     scan_records(view[pos:end], timestamps, header, limit))
        pos = end
    return scans


def _scanned(header: BatchHeader, keyless: list[int], deltas: list[int] | None, max_delta: int | None) -> RecordScan:
    if header.attributes & TIMESTAMP_TYPE_FLAG:  # log-append time: every record has the batch's max timestamp
        stamps = None if deltas is None else [header.max_timestamp] * len(deltas)
        return RecordScan(max(header.records_count, 0), keyless, stamps, header.max_timestamp)
    base = header.base_timestamp
    stamps = None if deltas is None else [base + delta for delta in deltas]
    return RecordScan(max(header.records_count, 0), keyless, stamps, header.max_timestamp if max_delta is None
                      else base + max_delta)


def _walk(data: bytes | memoryview, header: BatchHeader, timestamps: bool) -> RecordScan:
    """scan_records' walk in Python (as _scan.check in C: the same checks, messages and indexes)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    zigzag = _ZIGZAG
    keyless: list[int] = []
    deltas: list[int] | None = [] if timestamps else None
    max_delta = None
    size = len(data)
    pos = 0
    index = 0
    try:
        for index in range(header.records_count):
            # every varint inline (a helper function per varint costs 12-33% of the walk; benchmarks/record_scan.py):
            # its one-byte value from the table, the rest (and their errors) from read_varint;
            # a read past the end is an IndexError (pos only grows, so data[pos] fails exactly when pos >= size)
            b = data[pos]
            if b < 0x80:
                length = zigzag[b]
                pos += 1
            else:
                length, pos = _varint(data, pos, index)
            start = pos
            if length < 0 or length > size - pos:
                raise MalformedRecordError(f"record {index}: its length {length} overruns the {size - pos} bytes left "
                                           f"in the batch", index)
            end = pos + length
            pos += 1  # attributes: not read (Kafka has none in a record)
            b = data[pos]
            if b < 0x80:
                ts_delta = zigzag[b]
                pos += 1
            else:
                ts_delta, pos = _varint(data, pos, index)
            b = data[pos]
            if b < 0x80:
                offset_delta = zigzag[b]
                pos += 1
            else:
                offset_delta, pos = _varint(data, pos, index)
            if offset_delta != index:
                raise MalformedRecordError(f"record {index}: offset delta {offset_delta}, expected {index}", index)
            b = data[pos]
            if b < 0x80:
                klen = zigzag[b]
                pos += 1
            else:
                klen, pos = _varint(data, pos, index)
            if klen < -1:
                raise MalformedRecordError(f"record {index}: key of negative size {klen}", index)
            if klen > end - pos:
                raise MalformedRecordError(f"record {index}: key of {klen} bytes overruns its record", index)
            if klen < 0:
                keyless.append(index)
            else:
                pos += klen
            b = data[pos]
            if b < 0x80:
                vlen = zigzag[b]
                pos += 1
            else:
                vlen, pos = _varint(data, pos, index)
            if vlen < -1:
                raise MalformedRecordError(f"record {index}: value of negative size {vlen}", index)
            if vlen > end - pos:
                raise MalformedRecordError(f"record {index}: value of {vlen} bytes overruns its record", index)
            if vlen > 0:
                pos += vlen
            b = data[pos]
            if b < 0x80:
                nheaders = zigzag[b]
                pos += 1
            else:
                nheaders, pos = _varint(data, pos, index)
            if nheaders < 0 or nheaders > end - pos:
                raise MalformedRecordError(f"record {index}: header count {nheaders} does not fit its record", index)
            for _h in range(nheaders):
                b = data[pos]
                if b < 0x80:
                    hklen = zigzag[b]
                    pos += 1
                else:
                    hklen, pos = _varint(data, pos, index)
                if hklen < 0:
                    raise MalformedRecordError(f"record {index}: header key of negative size {hklen}", index)
                if hklen > end - pos:
                    raise MalformedRecordError(f"record {index}: header key of {hklen} bytes overruns its record",
                                               index)
                pos += hklen
                b = data[pos]
                if b < 0x80:
                    hvlen = zigzag[b]
                    pos += 1
                else:
                    hvlen, pos = _varint(data, pos, index)
                if hvlen < -1:
                    raise MalformedRecordError(f"record {index}: header value of negative size {hvlen}", index)
                if hvlen > end - pos:
                    raise MalformedRecordError(f"record {index}: header value of {hvlen} bytes overruns its record",
                                               index)
                if hvlen > 0:
                    pos += hvlen
            if pos != end:
                raise MalformedRecordError(f"record {index}: its fields take {pos - start} bytes, its length says "
                                           f"{length}", index)
            if max_delta is None or ts_delta > max_delta:
                max_delta = ts_delta
            if deltas is not None:
                deltas.append(ts_delta)
    except IndexError:
        raise MalformedRecordError(f"record {index} runs past the end of the batch", index) from None
    if pos != size:
        raise MalformedRecordError(f"{size - pos} bytes after the last of the batch's {header.records_count} records")
    return _scanned(header, keyless, deltas, max_delta)


def _varint(data: bytes, pos: int, index: int) -> tuple[int, int]:
    """read_varint, its errors named with the record's index (as the C walk names them)."""
    try:
        return read_varint(data, pos)
    except CorruptBatchError as exc:
        if str(exc) == "truncated varint":
            raise MalformedRecordError(f"record {index} runs past the end of the batch", index) from None
        raise MalformedRecordError(f"record {index}: {exc}", index) from None

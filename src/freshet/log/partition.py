"""A partition: an ordered sequence of segments with a log start offset and a high watermark.

Writes happen on one thread (the broker's event loop). Durability is split in three so the
fsync can run elsewhere while writes go on: ``begin_flush`` (collect dirty segments and the
log end offset they cover), ``Segment.flush`` (the fsync, any thread), ``complete_flush``
(advance the high watermark). Readers only ever see offsets below the high watermark, so a
consumer never reads a record that a crash could take back.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right
from dataclasses import dataclass

from freshet.format import errors as format_errors
from freshet.format.compression import TOPIC_CODECS
from freshet.format.control import ABORT, COMMIT, marker_batch, marker_type
from freshet.format.record_batch import (
    TIMESTAMP_TYPE_FLAG,
    BatchHeader,
    RecordScan,
    decode_records,
    iter_batches,
    read_header,
    recompress,
    scan_batches,
    set_max_timestamp,
    stamp_log_append_time,
    validate_batches,
    with_base_offset,
)

from .config import LogConfig
from .errors import (
    CorruptBatchError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from .leader_epoch import LeaderEpochCache
from .producer_state import ProducerEntry, ProducerStateManager
from .segment import LOG_SUFFIX, FileRegion, Segment
from .transactions import AbortedTransaction, TransactionIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int  # offset of the first record written (or first written before, for a duplicate)
    last_offset: int
    log_start_offset: int
    duplicate: bool = False
    log_append_time: int = -1  # the broker's time stamped in the batches (LogAppendTime topics), else -1


class Partition:
    """One partition's log on disk, in ``directory``."""

    def __init__(self, directory: str, config: LogConfig | None = None) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        os.makedirs(directory, exist_ok=True)
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.durable_offset = 0  # the log end offset the last fsync covered
        # replication (cluster mode only): the leader epoch stamped in every batch appended here (0: a one-node
        # broker, which has always led), the epoch cache, and the replica state that decides the high watermark
        # (None: it follows the fsync, as on one node)
        self.leader_epoch = 0
        self.leader_epochs = LeaderEpochCache(directory)
        self.replica = None
        self._generation = 0  # bumped by a truncation: an fsync begun before it covers nothing after it
        self._flush_generation = 0
        self.producer_state = ProducerStateManager()
        self.transactions = TransactionIndex()
        self.recovered_bytes_cut = 0
        self._dirty: dict[int, Segment] = {}
        self._open()
        # an epoch checkpointed before its first batch reached the disk (a crash between): as Kafka on load
        self.leader_epochs.truncate_from_end(self.log_end_offset)

    # -- opening -------------------------------------------------------------------------

    def _open(self) -> None:
        bases = sorted(
            int(name[: -len(LOG_SUFFIX)])
            for name in os.listdir(self.directory)
            if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit()
        )
        start_file = os.path.join(self.directory, "log-start-offset")
        if os.path.exists(start_file):
            with open(start_file) as f:
                self.log_start_offset = int(f.read().strip() or 0)
        for i, base in enumerate(bases):
            segment = Segment(self.directory, base, self.config.index_interval_bytes)
            active = i == len(bases) - 1
            # the active segment may hold a torn tail: check every CRC there
            found, cut = segment.recover(check_crc=active)
            self.recovered_bytes_cut += cut
            self._replay(segment, found)
            self.segments.append(segment)
        if not self.segments:
            self.segments.append(Segment(self.directory, self.log_start_offset, self.config.index_interval_bytes))
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.high_watermark = self.durable_offset = self.log_end_offset

    def _replay(self, segment: Segment, found) -> None:
        """Producer state and transactions from the batches ``found`` in ``segment`` ((position, header) each)."""
        for position, header in found:
            control_type = None
            if header.is_control:
                control_type = marker_type(segment.read(position, header.size))
                self.producer_state.fence(header.producer_id, header.producer_epoch)
            else:
                self.producer_state.load(header)
            self.transactions.batch(header, control_type)

    # -- state ---------------------------------------------------------------------------

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- writing -------------------------------------------------------------------------

    def append(self, records: bytes | memoryview) -> AppendResult:
        """Validate and append the batches of one produce request for this partition.

        Every check runs before anything is written: a refused request changes nothing. Batches the format
        refuses are refused as CorruptBatchError (length, CRC-32C, a payload that does not decompress) or
        InvalidRecordError (magic, counts, codec, records that do not hold together: then with the record's index,
        as Kafka's INVALID_RECORD).
        """
        try:
            return self._append(records)
        except format_errors.MalformedRecordError as exc:
            raise InvalidRecordError(str(exc), () if exc.index is None else ((exc.index, str(exc)),)) from None
        except format_errors.PayloadTooLargeError as exc:
            raise RecordTooLargeError(f"a compressed batch too large once decompressed: {exc}") from None
        except format_errors.CorruptBatchError as exc:
            raise CorruptBatchError(str(exc)) from None
        except format_errors.FormatError as exc:
            raise InvalidRecordError(str(exc)) from None

    def _append(self, records: bytes | memoryview) -> AppendResult:
        headers = validate_batches(records)
        for header in headers:
            if header.is_control:
                raise InvalidRecordError("control batches are written by the transaction coordinator, not producers")
        codec = TOPIC_CODECS.get(self.config.compression_type)  # None: producer, stored as sent
        if codec is not None and any(h.compression != codec for h in headers):
            records, headers = self._recompressed(records, headers, codec)
        for header in headers:
            if header.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
                )
        now_ms = int(time.time() * 1000)
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        bounded = not log_append and self._timestamps_bounded()
        # every batch's records walked once (their structure, and what the key and timestamp checks need)
        scans = scan_batches(records, headers, timestamps=bounded, limit=self._decompressed_limit())
        if self.config.compacted:
            self._require_keys(scans)
        if bounded:
            self._check_timestamps(scans, now_ms)
        pending: dict[int, ProducerEntry] = {}
        duplicate = None
        for header in headers:
            duplicate = self.producer_state.check(header, pending)
            if duplicate is not None:
                if len(headers) != 1:
                    duplicate = None  # a retried multi-batch request is rare; treat it as new
                break
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, self.log_start_offset, True)

        next_offset = self.log_end_offset
        view = memoryview(records)
        if len(headers) == 1:
            assigned = [headers[0]._replace(base_offset=next_offset)]
            data = with_base_offset(view, next_offset, self.leader_epoch)
        else:
            data = bytearray()
            assigned = []
            pos = 0
            offset = next_offset
            for header in headers:
                data += with_base_offset(view[pos : pos + header.size], offset, self.leader_epoch)
                assigned.append(header._replace(base_offset=offset))
                offset = header.last_offset - header.base_offset + offset + 1
                pos += header.size
        if log_append:  # the broker's clock in every batch, as Kafka stamps it (CRC recomputed)
            pos = 0
            for i, header in enumerate(assigned):
                stamp_log_append_time(data, pos, now_ms)
                assigned[i] = header._replace(attributes=header.attributes | TIMESTAMP_TYPE_FLAG, max_timestamp=now_ms)
                pos += header.size
        else:  # a max timestamp that is not the records' largest is corrected, as Kafka does (CRC recomputed)
            pos = 0
            for i, (header, scan) in enumerate(zip(assigned, scans)):
                if header.max_timestamp != scan.max_timestamp:
                    set_max_timestamp(data, pos, scan.max_timestamp)
                    assigned[i] = header._replace(max_timestamp=scan.max_timestamp)
                pos += header.size
        for header in assigned:
            self.producer_state.stage(header, header.base_offset, pending)
        self._write(data, assigned)
        self.producer_state.commit(pending)
        for header in assigned:
            self.transactions.batch(header)
        return AppendResult(assigned[0].base_offset, assigned[-1].last_offset, self.log_start_offset,
                            log_append_time=now_ms if log_append else -1)

    @staticmethod
    def _recompressed(records: bytes | memoryview, headers: list[BatchHeader], codec: int):
        """The topic's compression.type: batches in another codec recompressed, the rest as they came."""
        view = memoryview(records)
        out = bytearray()
        pos = 0
        for header in headers:
            batch = view[pos:pos + header.size]
            out += batch if header.compression == codec else recompress(batch, header, codec)
            pos += header.size
        return bytes(out), validate_batches(out)

    def _decompressed_limit(self) -> int:
        """The most a produced compressed batch's records may decompress to: 64 MiB, or 32 times max.message.bytes
        (a decompression bomb is refused as MESSAGE_TOO_LARGE before it fills the broker's memory; Kafka streams
        the records through its validator instead)."""
        return max(64 << 20, 32 * self.config.max_message_bytes)

    def _timestamps_bounded(self) -> bool:
        return (self.config.message_timestamp_before_max_ms < 2**63 - 1
                or self.config.message_timestamp_after_max_ms < 2**63 - 1)

    def _check_timestamps(self, scans: list[RecordScan], now_ms: int) -> None:
        """message.timestamp.before/after.max.ms (CreateTime): every record's timestamp must lie within them of
        the broker's clock (``scans`` carry the records' timestamps on topics that set a bound)."""
        before, after = self.config.message_timestamp_before_max_ms, self.config.message_timestamp_after_max_ms

        def fault(timestamp: int) -> str | None:
            if now_ms - timestamp > before:
                return (f"Timestamp {timestamp} is {now_ms - timestamp} ms before the broker's clock; "
                        f"message.timestamp.before.max.ms={before}")
            if timestamp - now_ms > after:
                return (f"Timestamp {timestamp} is {timestamp - now_ms} ms after the broker's clock; "
                        f"message.timestamp.after.max.ms={after}")
            return None

        def faults(scan: RecordScan) -> tuple[tuple[int, str], ...]:
            low, high = now_ms - before, now_ms + after
            if all(low <= t <= high for t in scan.timestamps):
                return ()
            return tuple((i, why) for i, why in enumerate(map(fault, scan.timestamps)) if why is not None)

        found = _first_faulty_batch(scans, faults)
        if found is not None:
            count, faults = found
            raise InvalidTimestampError(
                f"{_counted(faults, count)} have a timestamp too far from the broker's clock: {faults[0][1]}", faults)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> AppendResult:
        """End ``producer_id``'s transaction here with a COMMIT or ABORT control batch (the coordinator's
        write). The marker's epoch fences older epochs of the producer; a marker of an older epoch than the
        producer's is refused (InvalidProducerEpochError, nothing written), as Kafka's checkProducerEpoch: a late
        COMMIT or ABORT of a fenced epoch must not end the transaction the producer's new epoch has open."""
        entry = self.producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"a marker of producer {producer_id} epoch {producer_epoch}, older than "
                                            f"its epoch {entry.epoch}")
        offset = self.log_end_offset
        data = with_base_offset(memoryview(marker_batch(producer_id, producer_epoch, commit,
                                                        int(time.time() * 1000))), offset, self.leader_epoch)
        header = read_header(data)
        self._write(data, [header])
        self.producer_state.fence(producer_id, producer_epoch)
        self.transactions.batch(header, COMMIT if commit else ABORT)
        return AppendResult(offset, offset, self.log_start_offset)

    def append_as_follower(self, records: bytes | memoryview) -> int:
        """A follower's append: the leader's batches exactly as the leader wrote them (offsets, leader epochs,
        producer ids and sequences kept), continuing this log at its end. Batches that end before the log end
        are skipped (fetched again); anything else out of place, or failing its CRC, is refused and nothing is
        written; offsets may jump (a compacted leader's log). The producer state and the transaction index
        follow, so a new leader goes on checking sequences where the old one was. Returns the new log end
        offset."""
        try:
            headers = validate_batches(records)
        except format_errors.CorruptBatchError as exc:
            raise CorruptBatchError(str(exc)) from None
        except format_errors.FormatError as exc:
            raise InvalidRecordError(str(exc)) from None
        view = memoryview(records)
        start = 0
        expected = self.log_end_offset
        while headers and headers[0].last_offset < expected:
            start += headers.pop(0).size
        if not headers:
            return expected
        for header in headers:
            # offsets only go up; a gap is allowed (a compacted leader's log has whole batches removed)
            if header.base_offset < expected:
                raise InvalidRecordError(f"batch at offset {header.base_offset} overlaps the log, which ends at {expected}")
            expected = header.last_offset + 1
        epochs = self.leader_epochs
        for header in headers:
            if header.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(header.partition_leader_epoch, header.base_offset)
        data = view[start:]
        self._write(data, headers)
        pos = 0
        for header in headers:
            control_type = None
            if header.is_control:
                control_type = marker_type(data[pos:pos + header.size])
                self.producer_state.fence(header.producer_id, header.producer_epoch)
            else:
                self.producer_state.load(header)
            self.transactions.batch(header, control_type)
            pos += header.size
        return self.log_end_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after ``offset`` (a follower cutting a suffix its leader does not have;
        the batch holding ``offset`` goes whole). The producer state, transactions and epoch cache are rebuilt
        to match; the cut is fsync'd before this returns."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.log_start_offset:
            self.truncate_fully(self.log_start_offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        self.active_segment.truncate_to(offset)
        self._after_truncation()

    def truncate_fully(self, start_offset: int) -> None:
        """Empty the log and start it again at ``start_offset`` (a follower far behind its leader's log start)."""
        for segment in self.segments:
            segment.delete()
        self.segments = [Segment(self.directory, start_offset, self.config.index_interval_bytes)]
        self._bases = [start_offset]
        self._set_log_start_offset(start_offset)
        self.leader_epochs.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._generation += 1
        for segment in {id(s): s for s in (*self._dirty.values(), self.active_segment) if s.fd >= 0}.values():
            segment.flush()  # rare: the cut and anything written before it are made durable here and now
            segment.dirty = False
        self._dirty.clear()
        self._sync_directory()
        self.producer_state = ProducerStateManager()
        self.transactions = TransactionIndex()
        for segment in self.segments:
            self._replay(segment, segment.batch_headers())
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        end = self.log_end_offset
        self.high_watermark = min(self.high_watermark, end)
        self.durable_offset = end
        log.info("%s: truncated to offset %d", self.directory, end)

    def _write(self, data, headers: list[BatchHeader]) -> None:
        self._maybe_roll(len(data))
        segment = self.active_segment
        segment.append(data, headers)
        self._dirty[segment.base_offset] = segment

    @property
    def size_bytes(self) -> int:
        """Bytes of all the partition's segments (what DescribeLogDirs reports)."""
        return sum(segment.size for segment in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """What a read_committed consumer may read up to: below the oldest open transaction."""
        return self.transactions.last_stable_offset(self.high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        return self.transactions.aborted_between(start, end)

    def _require_keys(self, scans: list[RecordScan]) -> None:
        """Every record of a compacted topic has a key."""
        found = _first_faulty_batch(scans,
                                    lambda scan: tuple((i, "Compacted topic cannot accept message without key")
                                                       for i in scan.keyless))
        if found is not None:
            count, faults = found
            raise InvalidRecordError(
                f"{_counted(faults, count)} have no key: a compacted topic accepts only records with a key", faults)

    def _maybe_roll(self, incoming: int) -> None:
        active = self.active_segment
        if active.size == 0:
            return
        too_big = active.size + incoming > self.config.segment_bytes
        too_old = (time.time() - active.created_at) * 1000 >= self.config.segment_ms
        if too_big or too_old:
            self.roll()

    def roll(self) -> Segment:
        """Start a new active segment at the log end offset."""
        segment = Segment(self.directory, self.log_end_offset, self.config.index_interval_bytes)
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        self._sync_directory()
        return segment

    def _sync_directory(self) -> None:
        """Make a created, renamed or removed segment file itself durable."""
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- the start of the log ------------------------------------------------------------

    def advance_log_start(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset (it is persisted) and drop whole
        segments below it. Returns the new log start offset."""
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the log holds [{self.log_start_offset}, {self.high_watermark}]"
            )
        if offset > self.log_start_offset:
            self._set_log_start_offset(offset)
        self.delete_segments_below_start()
        return self.log_start_offset

    def _set_log_start_offset(self, offset: int) -> None:
        path = os.path.join(self.directory, "log-start-offset")
        with open(path + ".tmp", "w") as f:
            f.write(str(offset))
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        self.log_start_offset = offset

    def delete_segments_below_start(self) -> list[Segment]:
        """Remove every closed segment whose records all lie below the log start offset. (A segment that
        compaction emptied, at the log start, is not below it: it keeps the start where it is.)"""
        start = self.log_start_offset
        return self.delete_oldest_segments(lambda s: s.base_offset < start and s.next_offset <= start)

    def drop_emptied_segment(self, segment: Segment) -> None:
        """Compaction removed every record of ``segment``, a closed segment after the first: delete its file.
        The log start offset stays (compaction never moves it, as in Kafka: a reader at offset 0 of a
        compacted topic gets the first record kept, not OffsetOutOfRange)."""
        i = self.segments.index(segment)
        if i == 0 or segment is self.active_segment or segment.size:
            raise ValueError(f"{segment} is not an emptied closed segment after the first")
        self.segments.pop(i)
        self._bases.pop(i)
        segment.delete()
        self._sync_directory()

    def delete_oldest_segments(self, predicate) -> list[Segment]:
        """Delete closed segments from the oldest on while ``predicate(segment)`` holds.

        The active segment is never deleted; a segment still waiting for its fsync is left for
        the next round. The log start offset moves to the first segment kept.
        """
        deleted: list[Segment] = []
        while len(self.segments) > 1:
            segment = self.segments[0]
            if segment.dirty or not predicate(segment):
                break
            self.segments.pop(0)
            self._bases.pop(0)
            segment.delete()
            deleted.append(segment)
        if deleted:
            new_start = max(self.log_start_offset, self.segments[0].base_offset)
            if new_start != self.log_start_offset:
                self._set_log_start_offset(new_start)
            self.transactions.forget_below(self.log_start_offset)
            self._sync_directory()
            log.info("%s: deleted %d segment(s); log start offset %d", self.directory, len(deleted),
                     self.log_start_offset)
        return deleted

    # -- durability ----------------------------------------------------------------------

    def begin_flush(self) -> tuple[list[Segment], int]:
        """Segments with unsynced writes, and the log end offset an fsync of them makes durable."""
        dirty = list(self._dirty.values())
        self._dirty.clear()
        for segment in dirty:
            segment.dirty = False
        self._flush_generation = self._generation
        return dirty, self.log_end_offset

    def complete_flush(self, durable_offset: int) -> None:
        if self._flush_generation != self._generation:
            return  # the log was truncated meanwhile: that fsync says nothing of what is there now
        if durable_offset > self.durable_offset:
            self.durable_offset = durable_offset
        if self.replica is None:
            if durable_offset > self.high_watermark:
                self.high_watermark = durable_offset
        else:
            self.replica.flushed(self)

    def flush(self) -> None:
        """Synchronous fsync of everything written, then advance the high watermark."""
        segments, offset = self.begin_flush()
        for segment in segments:
            segment.flush()
        self.complete_flush(offset)

    @property
    def truncations(self) -> int:
        """How many times this log was cut (an fsync waited for before a cut may never come)."""
        return self._generation

    @property
    def has_unflushed(self) -> bool:
        return bool(self._dirty)

    # -- reading -------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, upper: int | None = None) -> bytes:
        """Whole batches starting with the one that holds ``offset``, up to ``max_bytes``.

        The first batch is returned whole even when it is larger than ``max_bytes`` (so a
        consumer always progresses). Nothing at or past ``upper`` (default: the high
        watermark) is returned. Raises OffsetOutOfRangeError outside [log start, upper].
        """
        found = self._locate(offset, max_bytes, upper)
        if found is None:
            return b""
        segment, start, end = found
        return segment.read(start, end - start)

    def read_region(self, offset: int, max_bytes: int, upper: int | None = None) -> FileRegion | None:
        """What ``read`` returns, as a region of a segment file to send without reading it (None: nothing)."""
        found = self._locate(offset, max_bytes, upper)
        if found is None:
            return None
        segment, start, end = found
        return FileRegion(segment.fd, start, end - start)

    def _locate(self, offset: int, max_bytes: int, upper: int | None) -> tuple[Segment, int, int] | None:
        limit = self.high_watermark if upper is None else upper
        if offset < self.log_start_offset or offset > limit:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {limit}]"
            )
        i = self._segment_index(offset)
        while i < len(self.segments) and offset < limit:
            segment = self.segments[i]
            if offset < segment.next_offset:
                found = segment.locate(offset, max_bytes, limit)
                if found is not None:
                    return segment, *found
            i += 1
        return None

    def batches(self):
        """Every batch from the log start offset up to the high watermark, as (header, bytes): for
        replaying a partition into memory (committed offsets, transaction state)."""
        offset = self.log_start_offset
        while offset < self.high_watermark:
            data = self.read(offset, 1 << 20)
            if not data:
                return
            for header, batch in iter_batches(data):
                yield header, batch
                offset = header.last_offset + 1

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self.log_start_offset:
                continue
            offset = max(segment.offset_for_time(timestamp), self.log_start_offset)
            while offset < min(segment.next_offset, self.high_watermark):
                found = segment.locate(offset, 1 << 20, self.high_watermark)
                if found is None:
                    break
                data = segment.read(found[0], found[1] - found[0])
                view = memoryview(data)
                pos = 0
                while pos < len(view):
                    header = read_header(view, pos)
                    batch = view[pos : pos + header.size]
                    pos += header.size
                    offset = header.last_offset + 1
                    if header.max_timestamp < timestamp:
                        continue
                    try:
                        for record in decode_records(batch):
                            if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                                return record.offset, record.timestamp
                    except Exception:  # a codec we cannot decode: answer at batch granularity
                        return max(header.base_offset, self.log_start_offset), header.max_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best = (-1, -1)
        for segment in self.segments:
            if segment.max_timestamp > best[1]:
                best = (segment.max_timestamp, segment.base_offset)
        if best[0] < 0:
            return -1, -1
        found = self.offset_for_timestamp(best[0])
        return found if found else (-1, -1)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        for segment in self.segments:
            if segment.dirty:
                segment.flush()
            segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)


def _first_faulty_batch(scans: list[RecordScan], faults) -> tuple[int, tuple[tuple[int, str], ...]] | None:
    """As Kafka's validator: the first batch with records that ``faults`` (a batch's RecordScan -> each wrong
    record's index in the batch with the reason) finds wrong, as its record count and those faults (None: all are
    fine)."""
    for scan in scans:
        found = faults(scan)
        if found:
            return scan.count, found
    return None


def _counted(faults: tuple[tuple[int, str], ...], count: int) -> str:
    """'2 of the 4 records of a batch (index 1, 3)'."""
    shown = ", ".join(str(i) for i, _ in faults[:3]) + (", ..." if len(faults) > 3 else "")
    return f"{len(faults)} of the {count} records of a batch (index {shown})"

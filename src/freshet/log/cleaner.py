"""The log cleaner: retention (delete old segments) and compaction (keep the newest record per key).

Retention, for ``cleanup.policy`` containing ``delete``: whole segments go, oldest first, while
their newest timestamp is older than ``retention.ms`` or the partition is larger than
``retention.bytes`` without them. An expired active segment is rolled first so it can go too.
The log start offset moves to the first segment kept; a consumer below it gets
OFFSET_OUT_OF_RANGE and its ``auto.offset.reset`` applies.

Compaction, for ``compact``: over the closed segments (the active segment is never touched),
the newest offset of every key is found; each closed segment is then rewritten keeping only
records that are the newest for their key. Kept records keep their offsets. A tombstone (null
value) is kept until it is older than ``delete.retention.ms`` by its timestamp, then removed,
so consumers that read within that time still see the delete.

``min.compaction.lag.ms``, as in Kafka: compaction stops at the first closed segment whose newest record (by
its timestamp) is younger than the lag; that segment and every later one are left as they are, and their
records do not count as the newest of their key, so a record stays readable, uncompacted, for at least the lag
after it is written (its timestamp). Such a segment is cleaned in a later round, once it is old enough.

Transactions: records of aborted transactions are removed (no read_committed reader sees them),
records of transactions still open (at or past the last stable offset) are left untouched, kept
transactional records keep their producer id, epoch and transactional flag, and control batches
(the COMMIT / ABORT markers) are always kept, so the transaction index rebuilds the same.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from freshet.format.record_batch import (
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    decode_records,
    encode_batch,
    iter_batches,
)

from .partition import Partition

log = logging.getLogger(__name__)


@dataclass
class CleanerStats:
    segments_deleted: int = 0
    segments_rewritten: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0


def apply_retention(partition: Partition, now_ms: int | None = None) -> int:
    """Delete segments past retention. Returns how many were deleted."""
    config = partition.config
    if "delete" not in config.cleanup_policy:
        return len(partition.delete_segments_below_start())
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    deleted = 0
    if config.retention_ms >= 0:
        horizon = now_ms - config.retention_ms
        active = partition.active_segment
        if active.size and active.max_timestamp < horizon and not partition.has_unflushed:
            partition.roll()  # an expired active segment goes too, as in Kafka
        deleted += len(partition.delete_oldest_segments(lambda s: s.max_timestamp < horizon))
    if config.retention_bytes >= 0:
        size = partition.size_bytes

        def over_limit(segment) -> bool:
            nonlocal size
            if size - segment.size >= config.retention_bytes:
                size -= segment.size
                return True
            return False

        deleted += len(partition.delete_oldest_segments(over_limit))
    deleted += len(partition.delete_segments_below_start())
    return deleted


def compact(partition: Partition, now_ms: int | None = None) -> CleanerStats:
    """Compact the closed segments of a partition (see the module docstring)."""
    stats = CleanerStats()
    if not partition.config.compacted or len(partition.segments) < 2:
        return stats
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    tombstone_horizon = now_ms - partition.config.delete_retention_ms
    closed = partition.segments[:-1]
    if any(s.dirty for s in closed):
        return stats  # not yet durable: next round
    last = getattr(partition, "_compaction_checkpoint", None)
    if last is not None and last[0] == _checkpoint(partition) and now_ms < last[1]:
        return stats  # nothing new to clean, the same configs, and no tombstone or lagging segment due yet
    # next_due: when a lagging segment comes of age or a kept tombstone expires (a reason to clean again)
    closed, next_due = _past_compaction_lag(closed, partition.config.min_compaction_lag_ms, now_ms)
    stable = partition.last_stable_offset

    def kind(header) -> str:
        if header.is_control:
            return "marker"
        if not header.is_transactional:
            return "plain"
        if header.base_offset >= stable:
            return "open"
        base = header.base_offset
        if any(a.producer_id == header.producer_id for a in partition.aborted_transactions(base, base + 1)):
            return "aborted"
        return "plain"

    newest: dict[bytes, int] = {}
    for segment in closed:
        for header, batch in iter_batches(segment.read(0, segment.size)):
            if kind(header) != "plain":
                continue
            for record in decode_records(batch):
                if record.key is not None:
                    newest[record.key] = record.offset

    for segment in closed:
        data = segment.read(0, segment.size)
        kept_batches: list[bytes] = []
        changed = False
        for header, batch in iter_batches(data):
            what = kind(header)
            if what in ("marker", "open"):
                kept_batches.append(bytes(batch))
                continue
            if what == "aborted":
                stats.records_removed += header.records_count
                changed = True
                continue
            records = list(decode_records(batch))
            kept = []
            for r in records:
                if r.key is None or newest.get(r.key) != r.offset:
                    stats.records_removed += 1
                    continue
                if r.value is None:
                    if r.timestamp < tombstone_horizon:
                        stats.tombstones_removed += 1
                        continue
                    next_due = min(next_due, r.timestamp + partition.config.delete_retention_ms)
                kept.append(r)
            if len(kept) == len(records):
                kept_batches.append(bytes(batch))
                continue
            changed = True
            if kept:
                base = kept[0].offset
                transactional = header.is_transactional
                kept_batches.append(encode_batch(
                    [(r.key, r.value, r.timestamp, r.headers) for r in kept],
                    base_offset=base, offset_deltas=[r.offset - base for r in kept],
                    producer_id=header.producer_id if transactional else -1,
                    producer_epoch=header.producer_epoch if transactional else -1,
                    attributes=TRANSACTIONAL_FLAG if transactional else 0,
                    log_append_time=header.max_timestamp if header.attributes & TIMESTAMP_TYPE_FLAG else None,
                ))
        if changed:
            segment.replace_contents(kept_batches)
            stats.segments_rewritten += 1
            if not kept_batches and segment is not partition.segments[0]:
                partition.drop_emptied_segment(segment)  # the first one stays, holding the log start
    partition._compaction_checkpoint = (_checkpoint(partition), next_due)  # type: ignore[attr-defined]
    if stats.segments_rewritten:
        log.info("%s: compacted %d segment(s), removed %d records and %d tombstones", partition.directory,
                 stats.segments_rewritten, stats.records_removed, stats.tombstones_removed)
    return stats


def _checkpoint(partition: Partition) -> tuple:
    """What a compaction round saw: the closed segments and the configs (a live change cleans again)."""
    last_closed = partition.segments[-2]
    return len(partition.segments) - 1, last_closed.base_offset, last_closed.next_offset, partition.config


def _past_compaction_lag(closed: list, lag_ms: int, now_ms: int) -> tuple[list, int]:
    """The closed segments compaction may touch: those before the first one holding a record younger than
    ``lag_ms`` (Kafka's first uncleanable segment); and when that one comes of age (1 << 62: none waits)."""
    if lag_ms <= 0:
        return closed, 1 << 62
    for index, segment in enumerate(closed):
        if segment.max_timestamp > now_ms - lag_ms:
            return closed[:index], segment.max_timestamp + lag_ms
    return closed, 1 << 62


def clean(partition: Partition, now_ms: int | None = None) -> CleanerStats:
    """One cleaner pass over a partition: retention, then compaction."""
    deleted = apply_retention(partition, now_ms)
    stats = compact(partition, now_ms)
    stats.segments_deleted = deleted
    return stats

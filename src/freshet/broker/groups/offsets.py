"""Committed offsets, kept in the internal compacted topic ``__consumer_offsets``.

Records use Kafka's own layout (key version 1: group, topic, partition; value version 3:
offset, leader epoch, metadata, commit timestamp), so Kafka's tools could read them. A commit
is answered only once its batch is fsync'd; on start the topic is replayed into memory (the
latest record per key wins, a tombstone deletes).
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from freshet.format.control import COMMIT, marker_type
from freshet.format.record_batch import TRANSACTIONAL_FLAG, decode_records, encode_batch, iter_batches
from freshet.log import StorageError

from ..replication import ReplicationError
from ..topics.registry import TopicRegistry

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    return buf[pos : pos + n].decode(), pos + n


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in (0, 1):
        return None  # group metadata records (version 2) are not offsets
    group, pos = _read_string(key, 2)
    topic, pos = _read_string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    return group, topic, partition


def encode_value(c: CommittedOffset) -> bytes:
    return (struct.pack(">hqi", OFFSET_VALUE_VERSION, c.offset, c.leader_epoch) + _string(c.metadata)
            + struct.pack(">q", c.commit_timestamp))


def decode_value(value: bytes) -> CommittedOffset:
    version, offset = struct.unpack_from(">hq", value, 0)
    pos = 10
    epoch = -1
    if version >= 3:
        (epoch,) = struct.unpack_from(">i", value, pos)
        pos += 4
    metadata, pos = _read_string(value, pos)
    (ts,) = struct.unpack_from(">q", value, pos)
    return CommittedOffset(offset, epoch, metadata, ts)


def failed_append_code(exc: Exception) -> ErrorCode:
    """What a coordinator answers when a write to its internal topic (``__consumer_offsets``,
    ``__transaction_state``, ``__share_group_state``) was not acknowledged, as Kafka's group and transaction
    coordinators map a failed append: NOT_COORDINATOR when this broker stopped leading the partition (the write may be
    cut from the log) or its log failed (KAFKA_STORAGE_ERROR); else (the ISR below min.insync.replicas, a timeout, any
    other failure) COORDINATOR_NOT_AVAILABLE. The client retries either way, after FindCoordinator for the first."""
    if isinstance(exc, StorageError) or (isinstance(exc, ReplicationError)
                                         and exc.error_code == ErrorCode.not_leader_or_follower):
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available


async def append_failure(broker, topic: str, partition, offset: int, timeout_s: float) -> ErrorCode | None:
    """Waits until a coordinator's write to its internal ``topic`` (partition 0) up to ``offset`` is durable: fsync'd
    on one node (``partition`` is that log), in the ISR on a cluster (within ``timeout_s``). None then; else what the
    coordinator answers (``failed_append_code``), NOT_COORDINATOR as well when this broker no longer leads the
    partition (nothing will acknowledge the write here). The one wait of the group, transaction and share
    coordinators."""
    try:
        if broker.replicas is None:
            await broker.group_commit.durable(partition, offset)
            return None
        _, leader = broker.replicas.check(topic, 0)
        if leader is None:
            log.info("%s-0 up to %d not acknowledged: this broker no longer leads it", topic, offset)
            return ErrorCode.not_coordinator
        await leader.acknowledged(offset, timeout_s)
    except Exception as exc:  # every failure is the coordinator's answer to its client
        log.info("%s-0 up to %d not acknowledged: %s", topic, offset, exc)
        return failed_append_code(exc)
    return None


def batches_below(partition, upper: int):
    """Every batch of ``partition`` from its log start up to ``upper`` (past its high watermark: a new leader
    replaying an internal topic to its log end), as (header, bytes)."""
    offset = partition.log_start_offset
    while offset < upper:
        data = partition.read(offset, 1 << 20, upper)
        if not data:
            return
        for header, batch in iter_batches(data):
            yield header, batch
            offset = header.last_offset + 1


class OffsetStore:
    """group -> (topic, partition) -> CommittedOffset, backed by ``__consumer_offsets``."""

    def __init__(self, registry: TopicRegistry) -> None:
        self.partition = registry.internal_topic(OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS).partitions[0]
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        # producer id -> [(key, value)]: transactional commits, applied when their transaction commits
        self.pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self._replay()

    def reload(self) -> None:
        """Forget what is in memory and replay the whole log: a broker of a cluster that becomes the leader of
        ``__consumer_offsets`` (its coordinator) takes over the commits its log replicated from the previous one,
        to its log end (a new leader's log is the partition's: its high watermark catches up with it)."""
        self.offsets.clear()
        self.pending.clear()
        self._replay(self.partition.log_end_offset)

    def _replay(self, upper: int | None = None) -> None:
        batches = self.partition.batches() if upper is None else batches_below(self.partition, upper)
        for header, batch in batches:
            if header.is_control:
                self.complete_transaction(header.producer_id, marker_type(batch) == COMMIT)
            elif header.is_transactional:
                self.pending.setdefault(header.producer_id, []).extend(
                    (r.key, r.value) for r in decode_records(batch))
            else:
                for record in decode_records(batch):
                    self._apply(record.key, record.value)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        decoded = decode_key(key)
        if decoded is None:
            return
        group, topic, partition = decoded
        if value is None:
            group_offsets = self.offsets.get(group)
            if group_offsets is not None:
                group_offsets.pop((topic, partition), None)
                if not group_offsets:
                    del self.offsets[group]
        else:
            self.offsets.setdefault(group, {})[(topic, partition)] = decode_value(value)

    def append(self, group: str, entries: dict[tuple[str, int], CommittedOffset | None]) -> int:
        """Write commits (None: delete) as one batch; returns the last offset to wait on for durability.
        The in-memory view changes at once, as Kafka's does after the append."""
        now = int(time.time() * 1000)
        records = [
            (encode_key(group, topic, partition), None if c is None else encode_value(c), now)
            for (topic, partition), c in entries.items()
        ]
        result = self.partition.append(encode_batch(records))
        for key, value, _ in records:
            self._apply(key, value)
        return result.last_offset

    def append_transactional(self, group: str, entries: dict[tuple[str, int], CommittedOffset],
                             producer_id: int, producer_epoch: int) -> int:
        """TxnOffsetCommit: the commits are written now, as part of the producer's transaction, and take
        effect when it commits (``complete_transaction``). Returns the last offset to wait on."""
        now = int(time.time() * 1000)
        records = [(encode_key(group, topic, partition), encode_value(c), now)
                   for (topic, partition), c in entries.items()]
        result = self.partition.append(encode_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                                                    attributes=TRANSACTIONAL_FLAG))
        self.pending.setdefault(producer_id, []).extend((k, v) for k, v, _ in records)
        return result.last_offset

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        for key, value in self.pending.pop(producer_id, []):
            if commit:
                self._apply(key, value)

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        """A transactional commit for this partition is waiting on its transaction (UNSTABLE_OFFSET_COMMIT)."""
        key = encode_key(group, topic, partition)
        return any(k == key for records in self.pending.values() for k, _ in records)

    def committed(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.get(group, {})

    def groups(self) -> list[str]:
        return list(self.offsets)

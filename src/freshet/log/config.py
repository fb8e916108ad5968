"""The settings one partition's log obeys (Kafka's topic-level names in comments)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1: forever)
    retention_bytes: int = -1  # retention.bytes (-1: no limit)
    cleanup_policy: str = "delete"  # cleanup.policy: delete | compact | compact,delete
    max_message_bytes: int = 1048588  # max.message.bytes (one batch)
    index_interval_bytes: int = 4096  # index.interval.bytes
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms (tombstones)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: a segment with a newer record is not compacted
    compression_type: str = "producer"  # compression.type: producer (as sent) | uncompressed | gzip | snappy | lz4 | zstd
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: CreateTime | LogAppendTime
    # CreateTime only: how far a record's timestamp may lie before / after the broker's clock
    message_timestamp_before_max_ms: int = 2**63 - 1  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 2**63 - 1  # message.timestamp.after.max.ms

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

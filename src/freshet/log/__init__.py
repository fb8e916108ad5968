"""The storage engine: Kafka v2 record batches (freshet.format) in segments, partitions with recovery."""

from .config import LogConfig
from .errors import (
    CorruptBatchError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)
from .partition import AppendResult, Partition
from .segment import FileRegion, Segment

__all__ = [
    "AppendResult", "CorruptBatchError", "FileRegion", "InvalidProducerEpochError",
    "InvalidRecordError", "LogConfig", "LogError", "OffsetOutOfRangeError",
    "OutOfOrderSequenceError", "Partition", "RecordTooLargeError", "Segment", "StorageError",
]

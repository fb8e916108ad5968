"""The storage engine: Kafka v2 record batches in segments, partitions with recovery."""

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
from .record_batch import BatchHeader, Record, decode_records, encode_batch, validate_batches
from .segment import FileRegion, Segment

__all__ = [
    "AppendResult", "BatchHeader", "CorruptBatchError", "FileRegion", "InvalidProducerEpochError",
    "InvalidRecordError", "LogConfig", "LogError", "OffsetOutOfRangeError",
    "OutOfOrderSequenceError", "Partition", "Record", "RecordTooLargeError", "Segment",
    "StorageError", "decode_records", "encode_batch", "validate_batches",
]

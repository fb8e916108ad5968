"""Errors raised by the log. Each names the Kafka error code a broker answers with."""

from __future__ import annotations


class LogError(Exception):
    """Base class. ``error_code`` is the Kafka protocol error code for this failure."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class CorruptBatchError(LogError):
    """A record batch failed its length, magic or CRC-32C check."""

    error_code = 2  # CORRUPT_MESSAGE


class InvalidRecordError(LogError):
    """A well-formed batch that the log refuses (wrong magic, keyless record on a compacted topic, ...)."""

    error_code = 87  # INVALID_RECORD


class RecordTooLargeError(LogError):
    """A batch larger than the topic's max.message.bytes."""

    error_code = 10  # MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(LogError):
    """A read below the log start offset or above the high watermark."""

    error_code = 1  # OFFSET_OUT_OF_RANGE


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch whose sequence number leaves a gap."""

    error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(LogError):
    """A batch from an older epoch of a producer id than one already seen."""

    error_code = 47  # INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(LogError):
    """A batch with a non-zero sequence from a producer id the partition has no state for."""

    error_code = 59  # UNKNOWN_PRODUCER_ID


class StorageError(LogError):
    """The disk refused a write (full, read-only, I/O error)."""

    error_code = 56  # KAFKA_STORAGE_ERROR

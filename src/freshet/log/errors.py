"""Errors raised by the log. The log says what went wrong; the broker says how the Kafka protocol
spells it (``freshet.broker.errors.error_code_for``), so the log knows nothing of the wire."""

from __future__ import annotations


class LogError(Exception):
    """Base class of everything the log refuses or fails at.

    ``record_errors``: when particular records are at fault, each one's index in its batch and why, as Kafka
    answers them (Produce v8+ ``record_errors``) so that a client fails exactly those records."""

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class CorruptBatchError(LogError):
    """A record batch failed its length, magic or CRC-32C check."""


class InvalidRecordError(LogError):
    """A well-formed batch that the log refuses (wrong magic, keyless record on a compacted topic, ...)."""


class InvalidTimestampError(LogError):
    """A record's timestamp lies further from the broker's clock than message.timestamp.before/after.max.ms allow."""


class RecordTooLargeError(LogError):
    """A batch larger than the topic's max.message.bytes."""


class OffsetOutOfRangeError(LogError):
    """A read below the log start offset or above the high watermark."""


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch whose sequence number leaves a gap."""


class InvalidProducerEpochError(LogError):
    """A batch from an older epoch of a producer id than one already seen."""


class UnknownProducerIdError(LogError):
    """A batch with a non-zero sequence from a producer id the partition has no state for."""


class StorageError(LogError):
    """The disk refused a write (full, read-only, I/O error)."""

"""How the broker spells what went wrong: Kafka's error codes, one spelling for the whole broker.

Handlers use kio's ``ErrorCode`` (generated from Kafka's own error list) directly; this module maps
the log's exceptions onto it, so the log stays free of the wire protocol.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from freshet.log import errors as log_errors

_LOG_ERRORS: dict[type[log_errors.LogError], ErrorCode] = {
    log_errors.CorruptBatchError: ErrorCode.corrupt_message,
    log_errors.InvalidRecordError: ErrorCode.invalid_record,
    log_errors.RecordTooLargeError: ErrorCode.message_too_large,
    log_errors.InvalidTimestampError: ErrorCode.invalid_timestamp,
    log_errors.OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    log_errors.OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    log_errors.InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    log_errors.UnknownProducerIdError: ErrorCode.unknown_producer_id,
    log_errors.StorageError: ErrorCode.kafka_storage_error,
}


def error_code_for(exc: log_errors.LogError) -> ErrorCode:
    """The code a Kafka broker answers with for ``exc`` (UNKNOWN_SERVER_ERROR for anything unmapped)."""
    for cls in type(exc).__mro__:
        code = _LOG_ERRORS.get(cls)
        if code is not None:
            return code
    return ErrorCode.unknown_server_error

"""What the format raises: bytes that do not follow the Kafka format. Each layer above says what it means
there (the log names a refused batch with its own errors, the broker closes a connection on a FrameError),
so this module knows nothing of them."""

from __future__ import annotations


class FormatError(ValueError):
    """Bytes that do not follow the Kafka format."""


class CorruptBatchError(FormatError):
    """A record batch whose bytes do not hold together: length, CRC-32C, a varint or a record that runs out."""


class InvalidBatchError(FormatError):
    """A whole batch the format does not accept: a magic other than 2, a record count its offsets deny, a codec
    Kafka does not have, a control batch without a control record."""


class MalformedRecordError(InvalidBatchError):
    """A batch whose CRC-32C holds but whose records do not: a length that overruns the batch or its record, a field
    of negative size, a header count that does not fit, an offset delta out of sequence, bytes left after the
    batch's count of records. ``index``: the record at fault in its batch (None: the batch as a whole). Kafka's
    record iterator answers these INVALID_RECORD."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class CorruptPayloadError(CorruptBatchError):
    """A records section that does not decompress with its codec."""


class PayloadTooLargeError(FormatError):
    """A compressed records section that decompresses to more than its reader allows (a decompression bomb)."""


class UnknownCodecError(InvalidBatchError):
    """A batch's attributes name a codec Kafka does not have."""


class FrameError(FormatError):
    """A protocol frame that cannot be parsed: the connection is closed, as Kafka does."""

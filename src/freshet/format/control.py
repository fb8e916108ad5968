"""Transaction markers: the control batches (transactional and control attribute bits) that end a producer's
transaction in one partition. Their one record's key is (version, type), type ABORT or COMMIT; the value is
(version, coordinator epoch)."""

from __future__ import annotations

import struct

from .errors import InvalidBatchError
from .record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, decode_records, encode_batch

ABORT, COMMIT = 0, 1
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int,
                 coordinator_epoch: int = 0) -> bytes:
    """The control batch that ends a producer's transaction in one partition."""
    key = CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value, timestamp_ms)], producer_id=producer_id, producer_epoch=producer_epoch,
                        attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)


def marker_type(batch: bytes | memoryview) -> int:
    """COMMIT or ABORT, read from a control batch's one record; InvalidBatchError if it has none."""
    for record in decode_records(batch):
        if record.key is None or len(record.key) < CONTROL_KEY.size:
            break
        return CONTROL_KEY.unpack_from(record.key)[1]
    raise InvalidBatchError("control batch without a control record")

import pytest

from freshet.log import CorruptBatchError, InvalidRecordError, decode_records, encode_batch, validate_batches
from freshet.log.record_batch import HEADER_SIZE, read_header, with_base_offset


def test_encode_then_validate_and_decode():
    batch = encode_batch([(b"k1", b"v1", 1000), (None, b"v2", 1005, (("h", b"x"),))])
    [header] = validate_batches(batch)
    assert header.records_count == 2
    assert header.base_timestamp == 1000 and header.max_timestamp == 1005
    records = list(decode_records(batch))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (0, b"k1", b"v1", 1000),
        (1, None, b"v2", 1005),
    ]
    assert records[1].headers == (("h", b"x"),)


def test_base_offset_patch_keeps_crc_valid():
    batch = with_base_offset(encode_batch([(b"k", b"v", 1)]), 12345, leader_epoch=7)
    [header] = validate_batches(bytes(batch))
    assert header.base_offset == 12345 and header.partition_leader_epoch == 7
    assert next(decode_records(bytes(batch))).offset == 12345


def test_flipped_byte_fails_crc():
    batch = bytearray(encode_batch([(b"k", b"value", 1)]))
    batch[-2] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        validate_batches(bytes(batch))


def test_truncated_batch_is_corrupt():
    batch = encode_batch([(b"k", b"value", 1)])
    with pytest.raises(CorruptBatchError):
        validate_batches(batch[:-3])
    with pytest.raises(CorruptBatchError):
        validate_batches(batch[: HEADER_SIZE - 1])
    with pytest.raises(CorruptBatchError):
        validate_batches(b"")


def test_wrong_magic_is_invalid_record():
    batch = bytearray(encode_batch([(b"k", b"v", 1)]))
    batch[16] = 1
    with pytest.raises(InvalidRecordError, match="magic"):
        validate_batches(bytes(batch))


def test_several_batches_in_one_record_set():
    data = encode_batch([(b"a", b"1", 1)]) + encode_batch([(b"b", b"2", 2), (b"c", b"3", 3)])
    headers = validate_batches(data)
    assert [h.records_count for h in headers] == [1, 2]
    assert read_header(data).records_count == 1

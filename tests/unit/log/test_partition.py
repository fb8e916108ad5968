import os

import pytest

from freshet.format.record_batch import decode_records, encode_batch, iter_batches
from freshet.log import (
    CorruptBatchError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogConfig,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    Partition,
    RecordTooLargeError,
)


def values(data: bytes) -> list[bytes]:
    return [r.value for _, batch in iter_batches(data) for r in decode_records(batch)]


def read_all(p: Partition, start: int = 0) -> list:
    out, offset = [], start
    while offset < p.high_watermark:
        data = p.read(offset, 1 << 16)
        for _, batch in iter_batches(data):
            for r in decode_records(batch):
                if r.offset >= offset:
                    out.append(r)
        offset = out[-1].offset + 1
    return out


def test_append_assigns_offsets_and_reads_back(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    r1 = p.append(encode_batch([(b"k", b"a", 10), (b"k", b"b", 11)]))
    r2 = p.append(encode_batch([(b"k", b"c", 12)]))
    assert (r1.base_offset, r1.last_offset, r2.base_offset) == (0, 1, 2)
    assert p.high_watermark == 0  # nothing visible before it is durable
    p.flush()
    assert p.high_watermark == 3
    assert [r.value for r in read_all(p)] == [b"a", b"b", b"c"]
    assert [r.offset for r in read_all(p, 2)] == [2]


def test_read_outside_the_log_is_out_of_range(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    p.append(encode_batch([(b"k", b"a", 10)]))
    p.flush()
    assert p.read(1, 100) == b""  # at the high watermark: nothing yet, no error
    with pytest.raises(OffsetOutOfRangeError):
        p.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        p.read(-1, 100)


def test_segments_roll_by_size_and_reads_cross_them(tmp_path):
    p = Partition(str(tmp_path / "p0"), LogConfig(segment_bytes=1000, index_interval_bytes=100))
    for i in range(200):
        p.append(encode_batch([(b"key", b"value-%03d" % i, 1000 + i)]))
    p.flush()
    assert len(p.segments) > 5
    assert all(s.size <= 1000 for s in p.segments)
    got = read_all(p)
    assert [r.offset for r in got] == list(range(200))
    assert got[137].value == b"value-137"
    assert [r.value for r in read_all(p, 150)][0] == b"value-150"


def test_segment_rolls_by_time(tmp_path):
    p = Partition(str(tmp_path / "p0"), LogConfig(segment_ms=0))
    p.append(encode_batch([(b"k", b"a", 1)]))
    p.append(encode_batch([(b"k", b"b", 2)]))
    assert [s.base_offset for s in p.segments] == [0, 1]


def test_max_bytes_returns_whole_batches_and_first_batch_always(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    for i in range(10):
        p.append(encode_batch([(b"k", b"x" * 100, i)]))
    p.flush()
    one = len(p.read(0, 1))
    assert one > 100  # the first batch whole, though larger than max_bytes
    assert len(p.read(0, one * 3 + 10)) == one * 3


def test_offset_for_timestamp(tmp_path):
    p = Partition(str(tmp_path / "p0"), LogConfig(segment_bytes=500, index_interval_bytes=50))
    for i in range(100):
        p.append(encode_batch([(b"k", b"a", 1000 + 10 * i), (b"k", b"b", 1005 + 10 * i)]))
    p.flush()
    assert p.offset_for_timestamp(0) == (0, 1000)
    assert p.offset_for_timestamp(1005) == (1, 1005)
    assert p.offset_for_timestamp(1006) == (2, 1010)
    assert p.offset_for_timestamp(1500) == (100, 1500)
    assert p.offset_for_timestamp(99999) is None
    assert p.max_timestamp() == (199, 1995)


def test_recovery_cuts_torn_tail_and_keeps_the_rest(tmp_path):
    d = str(tmp_path / "p0")
    p = Partition(d)
    for i in range(5):
        p.append(encode_batch([(b"k", b"v%d" % i, i)]))
    p.close()
    path = p.active_segment.path
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 7)  # a write torn mid-batch
    p = Partition(d)
    assert p.recovered_bytes_cut > 0
    assert p.log_end_offset == 4
    assert [r.value for r in read_all(p)] == [b"v0", b"v1", b"v2", b"v3"]
    r = p.append(encode_batch([(b"k", b"after", 9)]))
    assert r.base_offset == 4


def test_recovery_cuts_corrupt_batch(tmp_path):
    d = str(tmp_path / "p0")
    p = Partition(d)
    for i in range(3):
        p.append(encode_batch([(b"k", b"v%d" % i, i)]))
    p.close()
    path = p.active_segment.path
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 2)
        f.write(b"\xff\xff")
    p = Partition(d)
    assert p.log_end_offset == 2
    assert [r.value for r in read_all(p)] == [b"v0", b"v1"]


def test_garbage_appended_after_valid_data_is_cut(tmp_path):
    d = str(tmp_path / "p0")
    p = Partition(d)
    p.append(encode_batch([(b"k", b"v", 1)]))
    p.close()
    with open(p.active_segment.path, "ab") as f:
        f.write(os.urandom(200))
    p = Partition(d)
    assert p.log_end_offset == 1 and p.recovered_bytes_cut == 200


def test_batch_over_max_message_bytes_refused_and_nothing_written(tmp_path):
    p = Partition(str(tmp_path / "p0"), LogConfig(max_message_bytes=100))
    with pytest.raises(RecordTooLargeError):
        p.append(encode_batch([(b"k", b"x" * 200, 1)]))
    assert p.log_end_offset == 0 and p.active_segment.size == 0


def idem(pid, epoch, seq, value=b"v", n=1):
    return encode_batch([(b"k", value, 1)] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.mark.parametrize("spoil, refused", [
    (lambda b: b[:-3], CorruptBatchError),  # cut short
    (lambda b: b[:-2] + bytes([b[-2] ^ 0xFF]) + b[-1:], CorruptBatchError),  # CRC-32C
    (lambda b: b[:16] + b"\x01" + b[17:], InvalidRecordError),  # magic 1
])
def test_batches_the_format_refuses_are_log_errors_and_nothing_is_written(tmp_path, spoil, refused):
    """The format's errors come out of append as the log's own, which the broker answers with a Kafka code."""
    p = Partition(str(tmp_path / "p0"))
    with pytest.raises(refused) as caught:
        p.append(spoil(encode_batch([(b"k", b"value", 1)])))
    assert isinstance(caught.value, LogError)
    assert p.log_end_offset == 0


def test_idempotent_producer_duplicates_and_gaps(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    assert p.append(idem(7, 0, 0, n=3)).base_offset == 0
    assert p.append(idem(7, 0, 3)).base_offset == 3
    dup = p.append(idem(7, 0, 0, n=3))  # a retry of the first batch
    assert dup.duplicate and dup.base_offset == 0
    assert p.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        p.append(idem(7, 0, 9))
    assert p.append(idem(7, 0, 4)).base_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        p.append(idem(7, 1, 5))  # a new epoch must start at sequence 0
    assert p.append(idem(7, 1, 0)).base_offset == 5
    with pytest.raises(InvalidProducerEpochError):
        p.append(idem(7, 0, 5))  # the old epoch is fenced
    assert p.append(idem(7, 1, 1)).base_offset == 6
    assert p.log_end_offset == 7


def test_producer_state_survives_reopen(tmp_path):
    d = str(tmp_path / "p0")
    p = Partition(d)
    p.append(idem(3, 2, 0, n=2))
    p.append(idem(3, 2, 2))
    p.close()
    p = Partition(d)
    assert p.append(idem(3, 2, 2)).duplicate
    assert p.append(idem(3, 2, 3)).base_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        p.append(idem(3, 2, 10))


def test_compacted_partition_refuses_keyless_records(tmp_path):
    from freshet.log import InvalidRecordError

    p = Partition(str(tmp_path / "p0"), LogConfig(cleanup_policy="compact"))
    with pytest.raises(InvalidRecordError):
        p.append(encode_batch([(None, b"v", 1)]))
    p.append(encode_batch([(b"k", None, 1)]))  # a tombstone is fine
    assert p.log_end_offset == 1


def _gzipped(batch: bytes) -> bytes:
    """``batch`` with its records section in gzip, its CRC-32C recomputed (as a producer sends it)."""
    import struct

    import crc32c

    from freshet.format.compression import compress
    from freshet.format.record_batch import CRC_START, HEADER_SIZE

    body = compress(1, batch[HEADER_SIZE:])
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", head, CRC_START, struct.unpack_from(">h", head, CRC_START)[0] | 1)
    out = bytes(head) + body
    return out[:17] + struct.pack(">I", crc32c.crc32c(out[CRC_START:])) + out[21:]


def test_a_compacted_partition_names_the_keyless_records_of_the_first_batch_with_any(tmp_path):
    """The key check walks every batch of the request (compressed ones decompressed first, headers skipped):
    the first batch holding keyless records is refused with each one's index, and nothing is written."""
    p = Partition(str(tmp_path / "p0"), LogConfig(cleanup_policy="compact"))
    hdrs = (("__column_family__", b"default"),)
    fine = _gzipped(encode_batch([(b"k%d" % i, b"v" * 150, 1, hdrs) for i in range(3)]))
    keyless = _gzipped(encode_batch([(b"a", b"1", 1, hdrs), (None, b"2", 1, hdrs), (b"c", None, 1), (None, b"4", 1)]))
    with pytest.raises(InvalidRecordError) as refused:
        p.append(fine + keyless + keyless)
    assert refused.value.record_errors == tuple(
        (i, "Compacted topic cannot accept message without key") for i in (1, 3))
    assert str(refused.value) == ("2 of the 4 records of a batch (index 1, 3) have no key: "
                                  "a compacted topic accepts only records with a key")
    assert p.log_end_offset == 0
    assert p.append(fine).last_offset == 2


def test_a_compacted_partition_refuses_a_record_that_runs_past_itself_as_invalid(tmp_path):
    """A record whose length runs past the batch (the batch's CRC-32C holding) is INVALID_RECORD for that record,
    as Kafka's record iterator answers it, not a keyless record, even when the record before it has no key; nothing
    is written."""
    import struct

    import crc32c

    from freshet.format.record_batch import CRC_START, HEADER_SIZE

    p = Partition(str(tmp_path / "p0"), LogConfig(cleanup_policy="compact"))
    batch = bytearray(encode_batch([(None, b"v", 1), (b"k", b"value", 1)]))
    second = HEADER_SIZE + 1 + batch[HEADER_SIZE] // 2  # the second record's length varint
    batch[second] += 2  # one byte longer than its fields
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    with pytest.raises(InvalidRecordError, match="record 1: its length 13 overruns the 12 bytes left") as refused:
        p.append(bytes(batch))
    assert [index for index, _why in refused.value.record_errors] == [1]
    assert p.log_end_offset == 0

"""Every produced batch's records are walked before anything is stored, on every topic, as Kafka's leader walks
them: records that do not hold together (their batch's CRC-32C right) are INVALID_RECORD with the record at fault,
nothing of the request is written and the log end stays; a max timestamp that is not the records' largest is
corrected, as Kafka does."""

import struct
import time

import pytest

from freshet.format.compression import compress
from freshet.format.record_batch import HEADER_SIZE, decode_records, encode_batch, iter_batches, validate_batches
from freshet.log import InvalidRecordError, LogConfig, Partition
from freshet.testing.fuzz import record_level_batches, resealed

NOW = int(time.time() * 1000)
MALFORMED = {name: batch for name, (batch, code) in record_level_batches(NOW).items() if code != 0}
CONFIGS = {
    "plain": LogConfig(),
    "compacted": LogConfig(cleanup_policy="compact"),
    "timestamp-bounded": LogConfig(message_timestamp_before_max_ms=3_600_000),
    "log-append-time": LogConfig(message_timestamp_type="LogAppendTime"),
    "recompressing": LogConfig(compression_type="zstd"),
}


def _gzipped(batch: bytes) -> bytes:
    body = compress(1, batch[HEADER_SIZE:])
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", head, 21, 1)
    return resealed(bytes(head) + body)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_malformed_records_are_refused_on_every_topic_and_nothing_is_stored(tmp_path, config):
    p = Partition(str(tmp_path / "p0"), CONFIGS[config])
    fine = encode_batch([(b"k", b"fine", NOW)])
    assert p.append(fine).last_offset == 0
    size = p.size_bytes
    for name, batch in MALFORMED.items():
        for sent in (batch, _gzipped(batch), fine + batch):  # alone, compressed, after a good batch in one request
            with pytest.raises(InvalidRecordError) as refused:
                p.append(sent)
            assert str(refused.value).startswith("record ") or "bytes after the last" in str(refused.value), name
            assert (p.log_end_offset, p.size_bytes) == (1, size), name
    assert p.append(fine).base_offset == 1


def test_the_record_at_fault_is_named_in_the_record_errors(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    with pytest.raises(InvalidRecordError) as refused:
        p.append(MALFORMED["offset delta out of sequence"])
    assert refused.value.record_errors == ((1, "record 1: offset delta 2, expected 1"),)
    with pytest.raises(InvalidRecordError) as refused:  # the batch as a whole: no record to name
        p.append(MALFORMED["records_count below the records present"])
    assert refused.value.record_errors == ()
    assert str(refused.value) == "9 bytes after the last of the batch's 1 records"
    assert p.log_end_offset == 0


def test_well_formed_batches_of_every_shape_are_stored_as_sent(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    records = [(None, b"v", NOW, (("h", b"x"), ("null", None))), (b"k", None, NOW + 1), (b"", b"", NOW - 1)]
    for batch in (encode_batch(records), _gzipped(encode_batch(records))):
        appended = p.append(batch)
        stored = p.read(appended.base_offset, 1 << 20, upper=p.log_end_offset)
        assert stored[12:] == batch[12:]  # only the base offset is the broker's
    assert [(r.key, r.value, r.headers) for r in decode_records(stored)] == [r[:2] + (r[3] if len(r) > 3 else (),)
                                                                              for r in records]


def test_a_max_timestamp_that_is_not_the_records_largest_is_corrected(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    batch = bytearray(encode_batch([(b"a", b"1", NOW - 10), (b"b", b"2", NOW + 5), (b"c", b"3", NOW)]))
    struct.pack_into(">q", batch, 35, NOW - 500)  # the producer's max timestamp: below its own records'
    p.append(resealed(batch))
    stored = p.read(0, 1 << 20, upper=p.log_end_offset)
    [header] = validate_batches(stored)  # the CRC-32C recomputed
    assert header.max_timestamp == NOW + 5
    p.flush()
    assert p.offset_for_timestamp(NOW + 1) == (1, NOW + 5)
    assert [r.timestamp for _, b in iter_batches(stored) for r in decode_records(b)] == [NOW - 10, NOW + 5, NOW]


@pytest.mark.parametrize("codec", [3, 4])
def test_a_decompression_bomb_is_refused_as_too_large_and_nothing_is_stored(tmp_path, codec):
    """A small batch whose records would decompress to 80 MiB (past 64 MiB, and 32 times max.message.bytes) is
    MESSAGE_TOO_LARGE before its output is built (lz4: its blocks counted; zstd: its frame's content size)."""
    from freshet.log import RecordTooLargeError

    p = Partition(str(tmp_path / "p0"))
    body = compress(codec, b"\0" * (80 << 20))
    head = bytearray(encode_batch([(b"k", b"v", NOW)])[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", head, 21, codec)
    bomb = resealed(bytes(head) + body)
    assert len(bomb) < p.config.max_message_bytes
    with pytest.raises(RecordTooLargeError, match="too large once decompressed"):
        p.append(bomb)
    assert (p.log_end_offset, p.size_bytes) == (0, 0)

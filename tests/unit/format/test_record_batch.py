import pytest

from freshet.format.compression import compress, decompress
from freshet.format.control import ABORT, COMMIT, marker_batch, marker_type
from freshet.format.errors import (
    CorruptBatchError,
    CorruptPayloadError,
    InvalidBatchError,
    UnknownCodecError,
)
from freshet.format.record_batch import (
    HEADER_SIZE,
    decode_records,
    encode_batch,
    read_header,
    recompress,
    validate_batches,
    with_base_offset,
)


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


def test_wrong_magic_is_an_invalid_batch():
    batch = bytearray(encode_batch([(b"k", b"v", 1)]))
    batch[16] = 1
    with pytest.raises(InvalidBatchError, match="magic"):
        validate_batches(bytes(batch))


def test_several_batches_in_one_record_set():
    data = encode_batch([(b"a", b"1", 1)]) + encode_batch([(b"b", b"2", 2), (b"c", b"3", 3)])
    headers = validate_batches(data)
    assert [h.records_count for h in headers] == [1, 2]
    assert read_header(data).records_count == 1


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_recompressed_batch_holds_the_same_records(codec):
    plain = encode_batch([(b"k%d" % i, b"value %d" % i * 10, 1000 + i) for i in range(20)], base_offset=40)
    [header] = validate_batches(plain)
    packed = recompress(plain, header, codec)
    [packed_header] = validate_batches(packed)
    assert packed_header.compression == codec and len(packed) < len(plain)
    assert list(decode_records(packed)) == list(decode_records(plain))


def test_a_payload_that_does_not_decompress_or_an_unknown_codec():
    plain = encode_batch([(b"k", b"v", 1)])
    [header] = validate_batches(plain)
    garbled = bytearray(recompress(plain, header, 4))
    garbled[HEADER_SIZE + 2] ^= 0xFF
    with pytest.raises(CorruptPayloadError, match="does not decompress"):
        list(decode_records(bytes(garbled)))
    with pytest.raises(UnknownCodecError, match="codec 6"):
        compress(6, b"x")


def test_transaction_markers():
    for commit, kind in ((True, COMMIT), (False, ABORT)):
        marker = marker_batch(7, 2, commit, 1000)
        [header] = validate_batches(marker)
        assert header.is_control and header.is_transactional and header.producer_id == 7
        assert marker_type(marker) == kind
    not_a_marker = encode_batch([(None, b"v", 1)], attributes=0x30)
    with pytest.raises(InvalidBatchError, match="control record"):
        marker_type(not_a_marker)


def test_lz4_is_written_in_independent_blocks_as_kafka_requires():
    """Kafka's Java consumer refuses an LZ4 frame of linked blocks ("Dependent block stream is unsupported"); a topic
    with compression.type=lz4 recompresses into what librdkafka and Kafka's producers write."""
    data = encode_batch([(b"k%d" % i, b"v" * 100, i) for i in range(2000)])[HEADER_SIZE:]  # more than one block
    frame = compress(3, data)
    assert frame[:4] == b"\x04\x22\x4d\x18" and frame[4] & 0x20  # FLG: block independence
    assert bytes(decompress(3, frame)) == data


@pytest.mark.parametrize("size", [0, 100, 70_000, 300_000])
def test_lz4_frames_of_every_kind_decompress_into_a_buffer_sized_from_their_blocks(size):
    """Independent blocks (Kafka's producers, ours), linked blocks (cramjam's default), one block or several, blocks
    kept uncompressed (random bytes): all read back as written; a cut frame or a wrong block checksum is
    CorruptPayloadError."""
    import random

    import cramjam

    data = random.Random(size).randbytes(size // 2) + b"x" * (size - size // 2)
    for frame in (compress(3, data), bytes(cramjam.lz4.compress(data))):
        assert bytes(decompress(3, memoryview(frame))) == data
    frame = compress(3, data)
    for bad in (frame[:-3], frame[:10], frame[:-8] + b"\0\0\0\0" + frame[-4:] if size else frame[:-1]):
        with pytest.raises(CorruptPayloadError):
            decompress(3, bad)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompress_refuses_past_its_limit_before_it_builds_the_output_where_it_can(codec):
    """A decompression bomb: gzip stops at the limit as it decompresses, snappy reads its preamble, lz4 counts its
    blocks, zstd reads the content sizes in its frames' headers (or, a frame that does not say it, decompresses
    into a buffer of at most the limit + 1 bytes)."""
    import struct

    import cramjam

    from freshet.format.errors import PayloadTooLargeError

    data = b"\0" * 5000
    frames = [compress(codec, data)]
    if codec == 2:  # xerial framing, as Java clients write it: each chunk's preamble counted
        block = bytes(cramjam.snappy.compress_raw(data))
        chunk = struct.pack(">i", len(block)) + block
        frames.append(b"\x82SNAPPY\x00" + b"\0\0\0\x01\0\0\0\x01" + chunk + chunk)
    if codec == 4:  # a streaming frame: no content size in its header
        stream = cramjam.zstd.Compressor()
        stream.compress(data)
        frames.append(bytes(stream.finish()))
    for frame in frames:
        with pytest.raises(PayloadTooLargeError, match="more than 1000 bytes"):
            decompress(codec, frame, limit=1000)
        assert bytes(decompress(codec, frame, limit=1 << 16)) in (data, data * 2)


def test_zstd_and_lz4_sections_decompress_whole_and_exactly_up_to_the_limit():
    """Every zstd frame's size counts (frames with and without a content size, raw, RLE and compressed blocks, a
    skippable frame between them), an lz4 frame without its end mark is refused under the limit (cut) and past it
    (too large), and a section of exactly the limit is accepted, one byte more refused."""
    import random

    import cramjam

    from freshet.format.errors import PayloadTooLargeError

    def streamed(data: bytes) -> bytes:  # no content size in its header, as Kafka's Java producer writes it
        stream = cramjam.zstd.Compressor()
        stream.compress(data)
        return bytes(stream.finish())

    parts = [random.Random(1).randbytes(200_000), b"\0" * 300_000, b"abc" * 50_000, b"hello"]
    skippable = b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"xyz"
    whole = b"".join(parts)
    for section in (b"".join(compress(4, part) for part in parts),
                    b"".join(streamed(part) for part in parts),
                    compress(4, parts[0]) + skippable + streamed(parts[1]) + compress(4, parts[2] + parts[3])):
        assert bytes(decompress(4, section, limit=len(whole))) == whole
        with pytest.raises(PayloadTooLargeError):
            decompress(4, section, limit=len(whole) - 1)
    lz4 = compress(3, whole)
    assert bytes(decompress(3, lz4, limit=len(whole) + 70_000)) == whole
    with pytest.raises(CorruptPayloadError):
        decompress(3, lz4[:-4], limit=len(whole))  # no end mark
    with pytest.raises(PayloadTooLargeError):
        decompress(3, lz4[:-4], limit=len(whole) // 2)

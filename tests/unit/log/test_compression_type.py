"""A topic's compression.type: batches arriving in another codec are recompressed on append (same records,
offsets, timestamps and producer fields; a valid CRC), batches already in it and ``producer`` topics are stored
as they came."""

import struct

import pytest

from freshet.format.compression import TOPIC_CODECS, compress
from freshet.format.record_batch import decode_records, encode_batch, iter_batches, validate_batches
from freshet.log import LogConfig, Partition


def batch(codec: int, n: int = 20, producer_id: int = -1) -> bytes:
    raw = encode_batch([(b"k%d" % i, b"value %d" % i * 5, 1000 + i, (("h", b"%d" % i),)) for i in range(n)],
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1)
    if not codec:
        return raw
    body = compress(codec, raw[61:])
    header = bytearray(raw[:61])
    struct.pack_into(">i", header, 8, 49 + len(body))
    struct.pack_into(">h", header, 21, codec)
    return bytes(header) + body  # the CRC is left stale here: fixed below


def with_crc(data: bytes) -> bytes:
    import crc32c

    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def stored(p: Partition):
    p.flush()
    data = p.read(0, 1 << 20)
    headers = validate_batches(data)  # CRC-32C checked
    records = [(r.offset, r.key, r.value, r.timestamp, r.headers) for _, b in iter_batches(data) for r in decode_records(b)]
    return headers, records


@pytest.mark.parametrize("target", list(TOPIC_CODECS))
@pytest.mark.parametrize("sent", [0, 1, 2, 3, 4])
def test_batches_are_stored_in_the_topics_codec(tmp_path, target, sent):
    p = Partition(str(tmp_path / "p"), LogConfig(compression_type=target))
    reference = Partition(str(tmp_path / "r"), LogConfig())
    for part in (p, reference):
        part.append(with_crc(batch(sent)))
        part.append(with_crc(batch(sent, 3, producer_id=7)))
    headers, records = stored(p)
    assert {h.compression for h in headers} == {TOPIC_CODECS[target]}
    ref_headers, ref_records = stored(reference)
    assert records == ref_records  # the same records, offsets and timestamps
    assert [(h.producer_id, h.base_sequence, h.records_count, h.last_offset_delta) for h in headers] == \
        [(h.producer_id, h.base_sequence, h.records_count, h.last_offset_delta) for h in ref_headers]


def test_producer_keeps_each_batchs_codec_and_bytes(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig())
    sent = with_crc(batch(3))
    p.append(sent)
    p.flush()
    assert bytes(p.read(0, 1 << 20))[12:] == sent[12:]  # byte for byte past the base offset

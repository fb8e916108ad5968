"""Kafka's record-batch compression codecs (the low three bits of a batch's attributes), done and undone
with cramjam and zlib. The log (compaction, timestamp lookups, a topic's compression.type), the broker (client
telemetry) and the columnar range reader all decompress here."""

from __future__ import annotations

import struct
import zlib

import cramjam

from .errors import CorruptPayloadError, FormatError, PayloadTooLargeError, UnknownCodecError

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# a topic's compression.type -> codec (``producer``: keep each batch's own, absent here)
TOPIC_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(codec: int, payload: bytes | memoryview, limit: int | None = None):
    """The records section of a batch, decompressed (a bytes-like object; ``payload`` itself for codec 0).

    ``limit``: the most it may decompress to, else PayloadTooLargeError, checked before the output is built where
    the codec says its size (snappy's preamble, an lz4 frame's blocks, the content sizes of all of zstd's frames),
    and as it is built otherwise (gzip; lz4 and zstd decompress into a buffer of at most ``limit`` + 1 bytes)."""
    if codec == 0:
        return payload
    try:
        if codec == 1:
            if limit is None:
                return zlib.decompress(payload, 47)  # gzip or zlib header
            gzip = zlib.decompressobj(47)
            out = gzip.decompress(payload, limit + 1)
            _bounded(len(out), limit)
            if not gzip.eof:
                raise CorruptPayloadError("incomplete or truncated stream")
            return out
        if codec == 2:
            return _snappy(bytes(payload), limit)
        if codec == 3:
            return _lz4(payload, limit)  # the LZ4 frame format
        if codec == 4:
            if limit is None:
                return cramjam.zstd.decompress(payload)
            size = _zstd_content_size(memoryview(payload))
            _bounded(size, limit)
            if size is not None:  # every frame says its size: one buffer of that size
                return _into(cramjam.zstd, payload, size, size, limit)
            return _into(cramjam.zstd, payload, 8 * len(payload), limit + 1, limit)
    except FormatError:
        raise
    except (zlib.error, ValueError, cramjam.DecompressionError) as exc:
        raise CorruptPayloadError(str(exc) or type(exc).__name__) from None
    raise UnknownCodecError(f"unknown compression codec {codec}")


def compress(codec: int, payload: bytes | memoryview) -> bytes:
    """A records section compressed with ``codec`` as Kafka's clients write it (gzip, raw snappy, the LZ4 frame
    format, zstd); ``payload`` itself for codec 0."""
    if codec == 0:
        return bytes(payload)
    if codec == 1:
        gzip = zlib.compressobj(6, zlib.DEFLATED, 31)
        return gzip.compress(payload) + gzip.flush()
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(payload))
    if codec == 3:  # independent blocks, as Kafka's and librdkafka's producers write them: Kafka's LZ4 reader
        # refuses linked blocks ("Dependent block stream is unsupported"), cramjam's default
        lz4 = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        lz4.compress(bytes(payload))
        return bytes(lz4.finish())
    if codec == 4:
        return bytes(cramjam.zstd.compress(payload))
    raise UnknownCodecError(f"unknown compression codec {codec}")


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_MOST = 64 << 20  # a bound past this: left to cramjam's own growing buffer (not allocated up front)


def _bounded(size: int | None, limit: int | None) -> None:
    if size is not None and limit is not None and size > limit:
        raise PayloadTooLargeError(f"the records decompress to more than {limit} bytes")


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _into(codec, payload: bytes | memoryview, first: int, most: int, limit: int | None):
    """``payload`` decompressed by cramjam's ``codec`` (lz4 or zstd) into a buffer of ``first`` bytes, redone into
    one 4 times larger while it does not fit, up to ``most`` bytes: what does not fit in ``most`` is refused,
    PayloadTooLargeError past ``limit``, else CorruptPayloadError (more than the frames said), so no more than
    ``most`` bytes are ever allocated."""
    size = max(min(first, most), 1 << 16) if most > 1 << 16 else most
    while True:
        out = bytearray(size)
        try:
            done = codec.decompress_into(payload, out)
            _bounded(done, limit)  # filled ``most`` = ``limit`` + 1 bytes
            del out[done:]
            return out
        except cramjam.DecompressionError as exc:
            if "failed to write whole buffer" not in str(exc):  # cramjam's words for a full output buffer
                raise
        if size >= most:
            _bounded(size, limit)
            raise CorruptPayloadError("the records decompress to more than their frames say")
        size = min(size * 4, most)


def _zstd_content_size(view: memoryview) -> int | None:
    """The sum of the content sizes the headers of the zstd frames in ``view`` say, found by walking each frame's
    block headers (None: a frame does not say its size, or is not one this reads: cramjam decides)."""
    total = pos = 0
    end = len(view)
    while pos < end:
        if end - pos < 8:
            return None
        magic = view[pos:pos + 4]
        if magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50:  # a skippable frame
            pos += 8 + int.from_bytes(view[pos + 4:pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            return None
        fhd = view[pos + 4]
        single = (fhd >> 5) & 1
        size_bytes = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        at = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        if size_bytes == 0 or end < at + size_bytes:
            return None
        size = int.from_bytes(view[at:at + size_bytes], "little")
        total += size + 256 if size_bytes == 2 else size
        pos = at + size_bytes
        while True:  # the blocks: 3-byte headers (last flag, type, size); an RLE block carries 1 byte
            if end < pos + 3:
                return None
            block = int.from_bytes(view[pos:pos + 3], "little")
            kind = (block >> 1) & 3
            if kind == 3:
                return None
            pos += 3 + (1 if kind == 1 else block >> 3)
            if block & 1:
                break
        pos += 4 if fhd & 0x04 else 0  # the content checksum
    return total if pos == end else None


def _lz4(payload: bytes | memoryview, limit: int | None = None):
    """An LZ4 frame, decompressed into a buffer sized from its blocks (their count times the frame's block size):
    cramjam's frame decoder, left to grow its own buffer, took 110 us for a batch of 1,000 records (152 kB) and
    16 us into a buffer of the right size (benchmarks/produce_validation.py)."""
    bound = _lz4_bound(memoryview(payload))
    _bounded(bound, limit)
    if bound is not None and bound <= _LZ4_MOST:
        return _into(cramjam.lz4, payload, bound, bound, limit)
    if limit is None:
        return cramjam.lz4.decompress(payload)
    return _into(cramjam.lz4, payload, 8 * len(payload), limit + 1, limit)  # no end mark: bounded as it is built


def _lz4_bound(view: memoryview) -> int | None:
    """The most an LZ4 frame decompresses to, read from its block headers (None: not a frame whose blocks this
    reads: cramjam decides, and names what is wrong)."""
    if len(view) < 7 or view[:4] != _LZ4_MAGIC or view[4] >> 6 != 1 or view[4] & 0x01:
        return None
    flags, block_max = view[4], 1 << (2 * ((view[5] >> 4) & 7) + 8)  # BD 4..7: 64 kB .. 4 MB
    if not 1 << 16 <= block_max <= 1 << 22:
        return None
    checksum = 4 if flags & 0x10 else 0
    pos, blocks = 7 + (8 if flags & 0x08 else 0), 0  # magic, FLG, BD, [content size], header checksum
    while pos + 4 <= len(view):
        (size,) = struct.unpack_from("<I", view, pos)
        if size == 0:
            return blocks * block_max
        pos += 4 + (size & 0x7FFFFFFF) + checksum
        blocks += 1
    return None


def _snappy(data: bytes, limit: int | None = None):
    if not data.startswith(_XERIAL_MAGIC):
        _bounded(_snappy_size(data, 0), limit)
        return cramjam.snappy.decompress_raw(data)
    # xerial framing (Java clients): 16-byte header, then [int32 length][raw snappy block]...
    out = bytearray()
    pos = 16
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        _bounded(len(out) + (_snappy_size(data, pos) or 0), limit)
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + size]))
        pos += size
    return out


def _snappy_size(data: bytes, pos: int) -> int | None:
    """The uncompressed length a raw snappy block's preamble (an unsigned varint) says."""
    size = shift = 0
    for b in data[pos:pos + 5]:
        size |= (b & 0x7F) << shift
        if not b & 0x80:
            return size
        shift += 7
    return None

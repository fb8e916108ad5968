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
    the codec says its size (snappy's preamble, an lz4 frame's blocks, a zstd frame that carries its content size),
    as it is built for gzip, and after for a zstd frame that does not say its size."""
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
            if limit is not None:
                _bounded(_zstd_content_size(memoryview(payload)), limit)
            out = cramjam.zstd.decompress(payload)
            if limit is not None:
                _bounded(len(out), limit)
            return out
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


def _zstd_content_size(view: memoryview) -> int | None:
    """The content size a zstd frame's header says (None: it does not say)."""
    if len(view) < 6 or view[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = view[4]
    single = (fhd >> 5) & 1
    size_bytes = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if size_bytes == 0 or len(view) < at + size_bytes:
        return None
    size = int.from_bytes(view[at:at + size_bytes], "little")
    return size + 256 if size_bytes == 2 else size


def _lz4(payload: bytes | memoryview, limit: int | None = None):
    """An LZ4 frame, decompressed into a buffer sized from its blocks (their count times the frame's block size):
    cramjam's frame decoder, left to grow its own buffer, took 110 us for a batch of 1,000 records (152 kB) and
    16 us into a buffer of the right size (benchmarks/produce_validation.py)."""
    bound = _lz4_bound(memoryview(payload))
    _bounded(bound, limit)
    if bound is None or bound > _LZ4_MOST:
        out = cramjam.lz4.decompress(payload)
        _bounded(len(out), limit)
        return out
    out = bytearray(bound)
    del out[cramjam.lz4.decompress_into(payload, out):]
    return out


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

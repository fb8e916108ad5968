"""The framing primitives every protocol module reads with: the error for an unparseable frame,
unsigned varints (protocol lengths and tags; read, and written for hand-encoded responses) and
tagged-field skipping.

``protocol`` (request headers, decoding, responses) and ``frame_check`` (the structural walk
before kio's decoder) both build on this module; neither imports the other's internals.
"""

from __future__ import annotations


class FrameError(Exception):
    """A frame that cannot be parsed: the connection is closed, as Kafka does."""


def uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, position after it); never reads at or past ``end``."""
    end = len(buf) if end is None else end
    result = shift = 0
    while True:
        if pos >= end:
            raise FrameError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise FrameError("varint too long")


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """The position after a tagged-field section (a count, then tag, size, bytes for each)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise FrameError("tagged field runs past the frame")
    return pos

"""Kafka's two varints. Records (inside a batch) use zigzag varints, signed, up to 64 bits; the protocol's
compact lengths, counts and tags use unsigned varints, up to 32 bits."""

from __future__ import annotations

from .errors import CorruptBatchError, FrameError


def write_varint(out: bytearray, n: int) -> None:
    """Append ``n`` as a zigzag varint (a record's lengths, deltas and counts)."""
    v = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos``: (value, position after it); CorruptBatchError if it runs out or past 64 bits."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise CorruptBatchError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint too long")


def uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """The unsigned varint at ``pos``: (value, position after it); never reads at or past ``end``; FrameError if
    it runs out or past 35 bits."""
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

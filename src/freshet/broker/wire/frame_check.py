"""A structural check of a request body before kio's native decoder reads it.

kio's decoder trusts array and string lengths: a frame claiming an array of two billion elements
made it try to allocate 246 GB and abort the whole process (found by the fuzzer). This walk
follows the schema and checks that every length and count fits in the bytes that remain (each
array element takes at least one byte), so the decoder only ever sees frames whose sizes are
bounded by the frame itself. It reads no values; it raises FrameError or returns the end offset.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache
from typing import Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from freshet.format.errors import FrameError
from freshet.format.varint import read_uvarint as _uvarint

FIXED = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float64": 8, "bool": 1, "uuid": 16, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8,
    "datetime_i64": 8,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Walker = Callable[[bytes, int, int], int]  # (buffer, position, end) -> new position


def _need(pos: int, n: int, end: int) -> int:
    if n < 0 or pos + n > end:
        raise FrameError(f"field of {n} bytes at {pos} runs past the frame")
    return pos + n


def _length(flexible: bool, wide: bool) -> Callable[[bytes, int, int], tuple[int, int]]:
    """Reads a length or count: -1 means null. Compact forms store n+1 as an unsigned varint."""
    if flexible:
        def read(buf, pos, end):
            n, pos = _uvarint(buf, pos, end)
            return n - 1, pos
    elif wide:
        def read(buf, pos, end):
            _need(pos, 4, end)
            return _I32.unpack_from(buf, pos)[0], pos + 4
    else:
        def read(buf, pos, end):
            _need(pos, 2, end)
            return _I16.unpack_from(buf, pos)[0], pos + 2
    return read


def _primitive(kafka_type: str, flexible: bool, nullable: bool = True) -> Walker:
    if kafka_type in FIXED:
        size = FIXED[kafka_type]
        return lambda buf, pos, end: _need(pos, size, end)
    if kafka_type in ("string", "bytes", "records"):
        read_length = _length(flexible, wide=kafka_type != "string")
        lowest = -1 if nullable else 0

        def walk(buf, pos, end):
            n, pos = read_length(buf, pos, end)
            if n < lowest:
                raise FrameError(f"length {n} where a non-null {kafka_type} is required")
            return _need(pos, max(n, 0), end)

        return walk
    raise FrameError(f"unknown field type {kafka_type}")


def _array(element: Walker, flexible: bool, nullable: bool) -> Walker:
    read_count = _length(flexible, wide=True)
    lowest = -1 if nullable else 0

    def walk(buf, pos, end):
        count, pos = read_count(buf, pos, end)
        if count < lowest or count > end - pos:
            raise FrameError(f"array of {count} elements cannot fit in {end - pos} bytes")
        for _ in range(max(count, 0)):
            pos = element(buf, pos, end)
        return pos

    return walk


@cache
def walker(schema: type) -> Walker:
    flexible = schema.__flexible__
    regular: list[Walker] = []
    tagged: dict[int, Walker] = {}
    for f in fields(schema):
        kind = classify_field(f)
        nullable = is_optional(f) or "tag" in f.metadata
        if isinstance(kind, EntityTupleField):
            w = _array(walker(kind.type_), flexible, nullable)
        elif isinstance(kind, EntityField):
            inner = walker(kind.type_)
            if is_optional(f):
                def w(buf, pos, end, inner=inner):
                    _need(pos, 1, end)
                    return pos + 1 if buf[pos] == 0xFF else inner(buf, pos + 1, end)
            else:
                w = inner
        elif isinstance(kind, PrimitiveTupleField):
            w = _array(_primitive(f.metadata["kafka_type"], flexible, False), flexible, nullable)
        else:
            w = _primitive(f.metadata["kafka_type"], flexible, nullable)
        tag = f.metadata.get("tag")
        if tag is None:
            regular.append(w)
        else:
            tagged[int(tag)] = w

    def walk(buf, pos, end):
        for w in regular:
            pos = w(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise FrameError(f"{count} tagged fields cannot fit")
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                stop = _need(pos, size, end)
                if tag in tagged:
                    if tagged[tag](buf, pos, stop) != stop:
                        raise FrameError(f"tagged field {tag} does not fill its {size} bytes")
                pos = stop
        return pos

    return walk


def check(schema: type, frame: bytes, pos: int) -> int:
    """Walk ``schema`` over ``frame`` from ``pos``; FrameError if any size does not fit."""
    return walker(schema)(frame, pos, len(frame))

"""Frames, request and response headers, tagged-field sections and both kinds of varint, bytes in and values
out: what the broker, the columnar reader and the test clients frame with."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from freshet.format.errors import CorruptBatchError, FormatError, FrameError
from freshet.format.framing import (
    SIZE,
    read_request_header,
    read_response_header,
    request_header,
    response_header,
    size_prefixed,
    skip_tagged_fields,
)
from freshet.format.varint import read_uvarint, read_varint, uvarint, write_varint


def test_a_request_header_reads_back_as_written():
    v1 = request_header(3, 12, 7, b"app", flexible=False)
    assert v1 == struct.pack(">hhih", 3, 12, 7, 3) + b"app"
    header = read_request_header(v1 + b"body")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 7, "app")
    assert header.body_offset == len(v1)
    v2 = request_header(3, 12, 7, b"app", flexible=True)
    assert v2 == v1 + b"\0"  # an empty tagged-field section
    assert skip_tagged_fields(v2, read_request_header(v2).body_offset) == len(v2)


def test_a_null_client_id():
    header = read_request_header(request_header(18, 0, 1, None, flexible=False))
    assert header.client_id is None and header.body_offset == 10


def test_request_header_errors():
    with pytest.raises(FrameError, match="too short"):
        read_request_header(b"\x00\x01")
    with pytest.raises(FrameError, match="client id"):
        read_request_header(struct.pack(">hhih", 3, 12, 1, 50) + b"short")


def test_response_headers_v0_v1_and_api_versions_always_v0():
    assert response_header(3, 9, flexible=False) == struct.pack(">i", 9)
    assert response_header(3, 9, flexible=True) == struct.pack(">i", 9) + b"\0"
    assert response_header(18, 9, flexible=True) == struct.pack(">i", 9)
    assert read_response_header(response_header(3, 9, True) + b"body", 3, True) == (9, 5)
    assert read_response_header(response_header(18, 9, True) + b"body", 18, True) == (9, 4)
    with pytest.raises(FrameError):
        read_response_header(b"\0\0", 3, False)


def test_a_frame_is_its_payload_behind_its_size():
    frame = size_prefixed(b"hello")
    assert SIZE.unpack_from(frame)[0] == 5 and frame[4:] == b"hello"


def test_tagged_fields_are_skipped_and_bounded_by_the_frame():
    section = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(300) + uvarint(1) + b"z"
    assert skip_tagged_fields(section + b"rest", 0) == len(section)
    with pytest.raises(FrameError, match="past the frame"):
        skip_tagged_fields(uvarint(1) + uvarint(0) + uvarint(9) + b"ab", 0)


def test_unsigned_varints():
    assert uvarint(300) == b"\xac\x02" and read_uvarint(b"\xac\x02", 0) == (300, 2)
    with pytest.raises(FrameError, match="truncated"):
        read_uvarint(b"\x80", 0)
    with pytest.raises(FrameError, match="truncated"):
        read_uvarint(b"\xac\x02", 0, end=1)  # never past ``end``
    with pytest.raises(FrameError, match="too long"):
        read_uvarint(b"\xff" * 6 + b"\x01", 0)


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_varints_read_back_as_written(n):
    out = bytearray(b"x")
    write_varint(out, n)
    assert read_varint(out, 1) == (n, len(out))


def test_zigzag_varint_errors_are_corrupt_batches():
    assert bytes(_written(-1)) == b"\x01" and bytes(_written(1)) == b"\x02"
    with pytest.raises(CorruptBatchError, match="truncated"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptBatchError, match="too long"):
        read_varint(b"\xff" * 10 + b"\x01", 0)
    assert issubclass(CorruptBatchError, FormatError) and issubclass(FrameError, FormatError)


def _written(n: int) -> bytearray:
    out = bytearray()
    write_varint(out, n)
    return out

"""Kafka protocol framing: the size prefix of every frame, the request header (v1 layout; v2 adds a tagged
field section) and the response header (a correlation id; v1 adds a tagged field section), and skipping a
tagged field section. Bodies are kio's business; this module reads and writes only what surrounds them.

    frame = size_prefixed(request_header(api_key, version, correlation_id, b"client", flexible) + body)
"""

from __future__ import annotations

import struct

from .errors import FrameError
from .varint import read_uvarint

SIZE = struct.Struct(">i")  # the prefix of every frame: the bytes that follow it
_CORRELATION_ID = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
API_VERSIONS_KEY = 18  # its responses keep header v0 even in flexible versions, so old clients can read them
NO_TAGGED_FIELDS = b"\0"


def size_prefixed(payload: bytes) -> bytes:
    """``payload`` (a request or response: header and body) as a frame on the wire."""
    return SIZE.pack(len(payload)) + payload


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: bytes | None,
                   flexible: bool) -> bytes:
    """A request header: v2 (an empty tagged field section after the client id) for a flexible version, else v1."""
    client_length = -1 if client_id is None else len(client_id)
    header = _REQUEST_HEADER.pack(api_key, api_version, correlation_id, client_length) + (client_id or b"")
    return header + NO_TAGGED_FIELDS if flexible else header


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "body_offset")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None, body_offset: int):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_offset = body_offset


def read_request_header(frame: bytes) -> RequestHeader:
    """The fixed part of a request header (v1 layout; a flexible version's tagged fields are the caller's to skip,
    once it knows the version is flexible)."""
    if len(frame) < _REQUEST_HEADER.size:
        raise FrameError(f"frame of {len(frame)} bytes is too short for a request header")
    api_key, api_version, correlation_id, client_len = _REQUEST_HEADER.unpack_from(frame, 0)
    pos = _REQUEST_HEADER.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise FrameError("client id runs past the frame")
        client_id = frame[pos : pos + client_len].decode("utf-8", "replace")
        pos += client_len
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_header(api_key: int, correlation_id: int, flexible: bool) -> bytes:
    """A response header: v1 (an empty tagged field section) for a flexible version, except ApiVersions; else v0."""
    header = _CORRELATION_ID.pack(correlation_id)
    return header + NO_TAGGED_FIELDS if flexible and api_key != API_VERSIONS_KEY else header


def read_response_header(frame: bytes | memoryview, api_key: int, flexible: bool) -> tuple[int, int]:
    """(correlation id, where the body starts) of a response frame (without its size prefix)."""
    if len(frame) < _CORRELATION_ID.size:
        raise FrameError(f"frame of {len(frame)} bytes is too short for a response header")
    (correlation_id,) = _CORRELATION_ID.unpack_from(frame, 0)
    pos = _CORRELATION_ID.size
    if flexible and api_key != API_VERSIONS_KEY:
        pos = skip_tagged_fields(frame, pos)
    return correlation_id, pos


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """The position after a tagged-field section (a count, then tag, size, bytes for each)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise FrameError("tagged field runs past the frame")
    return pos

"""Produce responses written straight to bytes.

Produce is the request a broker answers most often (every producer, every linger interval), and the
generic path (``protocol.encode_response``) builds kio's response dataclasses from the handler's dict and
then walks them to write the bytes: on many small requests that is a tenth of the broker's CPU. Here the
dict the produce handler returns (versions 3 to 13) is packed with ``struct`` directly. Byte for byte what
kio writes (tests/unit/broker compares). A response with v10's current_leader and node_endpoints (tagged:
KIP-951's leader hint, a cluster's NOT_LEADER_OR_FOLLOWER, rare) is written by kio instead.
"""

from __future__ import annotations

import datetime
import struct

from freshet.format.varint import uvarint

from .protocol import encode_body

FIRST_VERSION = 3
LAST_VERSION = 13
FIRST_TOPIC_ID = 13  # topics named by id (KIP-516)
FIRST_FLEXIBLE = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_I64 = struct.Struct(">q")
_RECORD_ERROR = struct.Struct(">i")


def _millis(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _append_time(value) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\0" if flexible else b"\xff\xff"
        return
    data = value.encode()
    out += uvarint(len(data) + 1) if flexible else _I16.pack(len(data))
    out += data


def _count(out: bytearray, n: int, flexible: bool) -> None:
    out += uvarint(n + 1) if flexible else _I32.pack(n)


def encode_produce_body(version: int, body: dict) -> bytearray:
    """The response body (no size, no response header)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"produce response version {version} is not written here")
    if "node_endpoints" in body:  # a KIP-951 leader hint (a cluster's NOT_LEADER_OR_FOLLOWER): kio writes it
        return bytearray(encode_body(0, version, body))
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray()
    responses = body.get("responses", ())
    _count(out, len(responses), flexible)
    for topic in responses:
        if version >= FIRST_TOPIC_ID:
            out += topic["topic_id"].bytes
        else:
            _string(out, topic["name"], flexible)
        partitions = topic["partition_responses"]
        _count(out, len(partitions), flexible)
        for p in partitions:
            out += _PARTITION.pack(int(p["index"]), int(p["error_code"]), int(p["base_offset"]),
                                   _append_time(p.get("log_append_time")))
            if version >= 5:
                out += _I64.pack(int(p.get("log_start_offset", -1)))
            if version >= 8:
                errors = p.get("record_errors") or ()
                _count(out, len(errors), flexible)
                for e in errors:
                    out += _RECORD_ERROR.pack(int(e["batch_index"]))
                    _string(out, e.get("batch_index_error_message"), flexible)
                    if flexible:
                        out += b"\0"
                _string(out, p.get("error_message"), flexible)
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(_millis(body.get("throttle_time", 0)))
    if flexible:
        out += b"\0"
    return out

"""Fetch responses written straight to buffers, the record sets left where the log put them.

The generic path (``protocol.encode_response``) builds kio's response dataclasses and writes them
into one buffer: for a fetch that means copying every record set it returns once more into the
response, and building an object per partition. Here a fetch response body (the dict the fetch
handler returns, versions 4 to 18) becomes a list of buffers: the encoded fields between record
sets, and the record sets themselves (file regions from the log, or bytes), which the connection
sends as they are: regions with sendfile, never read into Python. Byte for byte what kio writes (tests/unit/broker compares).
A response carrying KIP-951's leader hint (tagged fields; a cluster's NOT_LEADER_OR_FOLLOWER, rare) is written by
kio instead, its record sets read into bytes by the handler.
"""

from __future__ import annotations

import datetime
import struct

from freshet.format.varint import uvarint

from .protocol import encode_body

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP_V7 = struct.Struct(">ihi")  # throttle_time, error_code, session_id
_PARTITION_V4 = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_ABORTED = struct.Struct(">qq")

FIRST_VERSION = 4
LAST_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13  # topics named by id (KIP-516)


def _millis(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def encode_fetch_body(version: int, body: dict) -> list:
    """The response body as a list of buffers (no size, no response header)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"fetch response version {version} is not written here")
    if "node_endpoints" in body:  # a KIP-951 leader hint (a cluster's NOT_LEADER_OR_FOLLOWER): kio writes it
        return [encode_body(1, version, body)]
    flexible = version >= FIRST_FLEXIBLE
    partition_struct = _PARTITION_V5 if version >= 5 else _PARTITION_V4
    parts: list = []
    head = bytearray()
    throttle = _millis(body.get("throttle_time", 0))
    if version >= 7:
        head += _TOP_V7.pack(throttle, int(body.get("error_code", 0)), body.get("session_id", 0))
    else:
        head += _I32.pack(throttle)
    responses = body.get("responses", ())
    head += uvarint(len(responses) + 1) if flexible else _I32.pack(len(responses))
    for topic in responses:
        if version >= FIRST_TOPIC_ID:
            head += topic["topic_id"].bytes
        else:
            name = topic["topic"].encode()
            if flexible:
                head += uvarint(len(name) + 1)
            else:
                head += _I16.pack(len(name))
            head += name
        partitions = topic["partitions"]
        head += uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for p in partitions:
            if version >= 5:
                head += partition_struct.pack(p["partition_index"], int(p.get("error_code", 0)), p["high_watermark"],
                                              p.get("last_stable_offset", -1), p.get("log_start_offset", -1))
            else:
                head += partition_struct.pack(p["partition_index"], int(p.get("error_code", 0)), p["high_watermark"],
                                              p.get("last_stable_offset", -1))
            aborted = p.get("aborted_transactions")
            if aborted is None:
                head += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                head += uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for a in aborted:
                    head += _ABORTED.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        head += b"\0"  # no tagged fields
            if version >= 11:
                head += _I32.pack(p.get("preferred_read_replica", -1))
            records = p.get("records")
            if records is None:
                head += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                size = len(records)
                head += uvarint(size + 1) if flexible else _I32.pack(size)
                if size:
                    parts.append(head)
                    parts.append(records)
                    head = bytearray()
            if flexible:
                head += b"\0"  # partition's tagged fields
        if flexible:
            head += b"\0"  # topic's tagged fields
    if flexible:
        head += b"\0"  # response's tagged fields
    parts.append(head)
    return parts

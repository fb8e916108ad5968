"""Review finding: GroupMetadata values of version 2 (Kafka 2.1-2.2, before KIP-345) have no group instance id in
their members; version 3 added it after the member id. decode_value takes both versions and must read each by
its own layout."""

import struct

from freshet.broker.groups.group_metadata import decode_value


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def test_a_version_2_group_metadata_value_is_read_without_a_group_instance_id():
    value = b"".join([
        struct.pack(">h", 2), _string("consumer"), struct.pack(">i", 5), _string("range"), _string("m-1"),
        struct.pack(">q", 1700000000000), struct.pack(">i", 1),
        _string("m-1"), _string("client"), _string("/10.0.0.1"), struct.pack(">ii", 300000, 45000),
        _bytes(b"subscription"), _bytes(b"assignment")])
    group = decode_value(value)
    assert (group["protocol_type"], group["generation"], group["protocol"], group["leader"]) == \
        ("consumer", 5, "range", "m-1")
    [member] = group["members"]
    assert member == {"member_id": "m-1", "group_instance_id": None, "client_id": "client",
                      "client_host": "/10.0.0.1", "rebalance_timeout_ms": 300000, "session_timeout_ms": 45000,
                      "subscription": b"subscription", "assignment": b"assignment"}

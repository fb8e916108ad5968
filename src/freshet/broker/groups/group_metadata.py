"""Classic groups' membership in ``__consumer_offsets``, as Kafka's GroupMetadata records (key version 2: the
group id; value version 3: protocol type, generation, protocol, leader, state timestamp, and each member's id,
instance id, client id and host, timeouts, subscription and assignment), so that a group's membership moves
with its coordinator in a cluster.

The coordinator writes a group's record when a generation's assignment is complete (SyncGroup from its leader:
the group Stable) and when its last member goes (Empty). A broker that becomes the coordinator (the leader of
``__consumer_offsets``) reads the records and takes the groups over as they were: their members go on with the
same member ids and generation, heartbeating and committing, with no rebalance, as Kafka's coordinator loads
groups on a failover. Without this, a new coordinator knew no member and refused their commits
(UNKNOWN_MEMBER_ID), so a consumer that commits after processing read the last batch again."""

from __future__ import annotations

import struct
import time

from freshet.format.record_batch import decode_records, encode_batch

from .classic import DEAD, EMPTY, STABLE, Group, GroupCoordinator, Member
from .offsets import batches_below

GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes(self) -> bytes:
        n = self.take(">i")
        b = self.data[self.pos:self.pos + max(n, 0)]
        self.pos += max(n, 0)
        return bytes(b)


def encode_key(group_id: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group_id)


def decode_key(key: bytes) -> str | None:
    """The group id of a GroupMetadata record's key, None for any other key (offsets: versions 0 and 1)."""
    if len(key) < 2 or struct.unpack_from(">h", key, 0)[0] != GROUP_KEY_VERSION:
        return None
    return _Reader(key[2:]).string()


def encode_value(g: Group, now_ms: int | None = None) -> bytes:
    out = [struct.pack(">h", GROUP_VALUE_VERSION), _string(g.protocol_type or ""), struct.pack(">i", g.generation),
           _string(g.protocol_name), _string(g.leader),
           struct.pack(">q", int(time.time() * 1000) if now_ms is None else now_ms),
           struct.pack(">i", len(g.members))]
    for m in g.members.values():
        out += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id), _string(m.client_host),
                struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                _bytes(m.metadata_for(g.protocol_name)), _bytes(m.assignment)]
    return b"".join(out)


def decode_value(value: bytes) -> dict:
    r = _Reader(value)
    version = r.take(">h")
    if version not in (2, 3):
        raise ValueError(f"GroupMetadata value version {version} is not 2 or 3")
    group = {"protocol_type": r.string(), "generation": r.take(">i"), "protocol": r.string(), "leader": r.string(),
             "state_timestamp": r.take(">q"), "members": []}
    for _ in range(r.take(">i")):
        group["members"].append({
            "member_id": r.string(), "group_instance_id": r.string() if version >= 3 else None,  # v3: KIP-345
            "client_id": r.string(),
            "client_host": r.string(), "rebalance_timeout_ms": r.take(">i"), "session_timeout_ms": r.take(">i"),
            "subscription": r.bytes(), "assignment": r.bytes()})
    return group


def store(offsets, g: Group) -> None:
    """Appends the group's GroupMetadata record to ``__consumer_offsets`` (replicated with the commits); a tombstone
    for a deleted group (Dead)."""
    value = None if g.state == DEAD else encode_value(g)
    offsets.partition.append(encode_batch([(encode_key(g.group_id), value, int(time.time() * 1000))]))


def read(partition) -> dict[str, dict | None]:
    """The last GroupMetadata record of each group in the log, to its end (None: a tombstone)."""
    found: dict[str, dict | None] = {}
    for header, batch in batches_below(partition, partition.log_end_offset):
        if header.is_control or header.is_transactional:
            continue
        for record in decode_records(batch):
            group_id = decode_key(record.key) if record.key else None
            if group_id is not None:
                found[group_id] = decode_value(record.value) if record.value is not None else None
    return found


def restore(coordinator: GroupCoordinator, records: dict[str, dict | None]) -> int:
    """Takes over the groups of the records: each one's members (their session starting now), generation,
    protocol and leader, Stable, or Empty when it has no member. Returns how many members were taken over."""
    now = time.monotonic()
    members = 0
    for group_id, record in records.items():
        old = coordinator.groups.get(group_id)
        if old is not None and old.members and any(
                m.join_future is not None and not m.join_future.done() for m in old.members.values()):
            continue  # a rebalance going on here already
        if record is None:
            coordinator.groups.pop(group_id, None)
            continue
        g = Group(group_id, state=STABLE if record["members"] else EMPTY, generation=record["generation"],
                  protocol_type=record["protocol_type"] or None, protocol_name=record["protocol"],
                  leader=record["leader"], new_group=False)
        for m in record["members"]:
            g.members[m["member_id"]] = Member(
                m["member_id"], m["group_instance_id"], m["client_id"] or "", m["client_host"] or "",
                m["session_timeout_ms"], m["rebalance_timeout_ms"], record["protocol_type"] or "",
                [(record["protocol"] or "", m["subscription"])], assignment=m["assignment"], last_heartbeat=now)
            if m["group_instance_id"] is not None:
                g.static_members[m["group_instance_id"]] = m["member_id"]
        members += len(g.members)
        coordinator.groups[group_id] = g
    coordinator.taken_over([now + m.session_timeout_ms / 1000 for g in coordinator.groups.values()
                            for m in g.members.values() if m.last_heartbeat == now])
    return members

"""KIP-848 consumer groups' state in ``__consumer_offsets``, as Kafka's new group coordinator writes it, so that a
group's members, epochs and assignments move with its coordinator in a cluster (as group_metadata.py does for
classic groups).

Kafka's records (key version: the record type; values version 0, flexible):

- 3 ConsumerGroupMetadata (group id): the group epoch;
- 4 ConsumerGroupPartitionMetadata (group id): the subscribed topics (id, name, partition count);
- 5 ConsumerGroupMemberMetadata (group id, member id): instance id, rack, client id and host, subscribed topic
  names and regex, rebalance timeout, server assignor;
- 6 ConsumerGroupTargetAssignmentMetadata (group id): the assignment epoch;
- 7 ConsumerGroupTargetAssignmentMember (group id, member id): the member's target partitions (by topic id);
- 8 ConsumerGroupCurrentMemberAssignment (group id, member id): member epoch, previous epoch, state, assigned
  partitions and partitions pending revocation.

The coordinator writes the records that changed after each heartbeat, leave, expiry or deletion (tombstones for
the members gone and, for a deleted group, all its records). A broker that becomes the coordinator reads them
and takes the groups over: each member keeps its id, epoch and partitions, and its next heartbeat is answered at
its epoch (not UNKNOWN_MEMBER_ID, which made it rejoin from epoch 0); sessions count from the takeover."""

from __future__ import annotations

import struct
import time
import uuid

from freshet.format.record_batch import decode_records, encode_batch

from .consumer import (MEMBER_STABLE, UNRELEASED, UNREVOKED, Assignment, ConsumerGroup, ConsumerGroupCoordinator,
                       ConsumerMember)
from .offsets import batches_below

GROUP, PARTITIONS, MEMBER, TARGET, TARGET_MEMBER, CURRENT = 3, 4, 5, 6, 7, 8
_PER_GROUP = (GROUP, PARTITIONS, TARGET)
_PER_MEMBER = (MEMBER, TARGET_MEMBER, CURRENT)
VALUE_VERSION = 0
# Kafka's MemberState codes
_STATE_CODES = {MEMBER_STABLE: 0, UNREVOKED: 1, UNRELEASED: 2}
_CODE_STATES = {v: k for k, v in _STATE_CODES.items()}


# -- encoding ----------------------------------------------------------------------------------------------------

def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _cstring(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _carray(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


_NO_TAGS = b"\x00"


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    out = struct.pack(">h", version) + _string(group_id)
    return out if member_id is None else out + _string(member_id)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _value(*parts: bytes) -> bytes:
    return struct.pack(">h", VALUE_VERSION) + b"".join(parts) + _NO_TAGS


def _topic_partitions(assignment: Assignment, ids: dict[str, uuid.UUID]) -> bytes:
    return _carray([ids[t].bytes + _carray([struct.pack(">i", p) for p in sorted(ps)]) + _NO_TAGS
                    for t, ps in sorted(assignment.items()) if t in ids])


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def string(self) -> str:
        n = self.take(">h")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def cstring(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def carray(self, item) -> list:
        n = self.uvarint() - 1
        return [item() for _ in range(max(n, 0))]

    def uuid(self) -> uuid.UUID:
        u = uuid.UUID(bytes=bytes(self.data[self.pos:self.pos + 16]))
        self.pos += 16
        return u

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _read_topic_partitions(r: _Reader) -> list[tuple[uuid.UUID, list[int]]]:
    def one():
        topic_id, partitions = r.uuid(), r.carray(lambda: r.take(">i"))
        r.tags()
        return topic_id, partitions
    return r.carray(one)


def decode_key(key: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group id, member id or None) of a consumer group record's key; None for any other key."""
    if len(key) < 2:
        return None
    version = struct.unpack_from(">h", key, 0)[0]
    if version not in _PER_GROUP + _PER_MEMBER:
        return None
    r = _Reader(key, 2)
    group_id = r.string()
    return version, group_id, r.string() if version in _PER_MEMBER else None


def decode_value(kind: int, value: bytes) -> dict:
    r = _Reader(value)
    version = r.take(">h")
    if version != VALUE_VERSION:
        raise ValueError(f"consumer group record type {kind}: value version {version} is not {VALUE_VERSION}")
    if kind == GROUP:
        out = {"epoch": r.take(">i")}
    elif kind == TARGET:
        out = {"assignment_epoch": r.take(">i")}
    elif kind == PARTITIONS:
        def topic():
            t = {"topic_id": r.uuid(), "name": r.cstring(), "partitions": r.take(">i")}
            r.carray(lambda: (r.take(">i"), r.carray(r.cstring), r.tags()))  # racks per partition: not used
            r.tags()
            return t
        out = {"topics": r.carray(topic)}
    elif kind == MEMBER:
        out = {"instance_id": r.cstring(), "rack_id": r.cstring(), "client_id": r.cstring(),
               "client_host": r.cstring(), "subscribed_names": r.carray(r.cstring), "subscribed_regex": r.cstring(),
               "rebalance_timeout_ms": r.take(">i"), "server_assignor": r.cstring()}
    elif kind == TARGET_MEMBER:
        out = {"partitions": _read_topic_partitions(r)}
    else:
        out = {"epoch": r.take(">i"), "previous_epoch": r.take(">i"), "state": r.take(">b"),
               "assigned": _read_topic_partitions(r), "pending_revocation": _read_topic_partitions(r)}
    r.tags()
    return out


def group_records(coordinator: ConsumerGroupCoordinator, group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record (key -> value) that describes ``group`` now."""
    named = {t for t, _ in group.topics_seen} | {t for a in group.target.values() for t in a} | {
        t for m in group.members.values() for t in (*m.assigned, *m.pending_revocation)}
    ids = {t: topic.topic_id for t in named if (topic := coordinator.topics.get(t)) is not None}
    gid = group.group_id
    records = {
        _key(GROUP, gid): _value(struct.pack(">i", group.epoch)),
        _key(PARTITIONS, gid): _value(_carray([
            ids[t].bytes + _cstring(t) + struct.pack(">i", n) + _carray([]) + _NO_TAGS
            for t, n in group.topics_seen if t in ids])),
        _key(TARGET, gid): _value(struct.pack(">i", group.assignment_epoch)),
    }
    for m in group.members.values():
        mid = m.member_id
        records[_key(MEMBER, gid, mid)] = _value(
            _cstring(m.instance_id), _cstring(m.rack_id), _cstring(m.client_id), _cstring(m.client_host),
            _carray([_cstring(t) for t in m.subscribed_names]), _cstring(m.subscribed_regex),
            struct.pack(">i", m.rebalance_timeout_ms), _cstring(m.server_assignor))
        records[_key(TARGET_MEMBER, gid, mid)] = _value(_topic_partitions(group.target.get(mid, {}), ids))
        records[_key(CURRENT, gid, mid)] = _value(
            struct.pack(">iib", m.epoch, m.previous_epoch, _STATE_CODES[m.state]),
            _topic_partitions(m.assigned, ids), _topic_partitions(m.pending_revocation, ids))
    return records


class ConsumerGroupStore:
    """Writes what changed of a coordinator's consumer groups to ``__consumer_offsets`` (``changed``, its
    ``on_change``), remembering what the log holds of each group (primed by ``restore``)."""

    def __init__(self, coordinator: ConsumerGroupCoordinator, offsets) -> None:
        self.coordinator, self.offsets = coordinator, offsets
        self.written: dict[str, dict[bytes, bytes]] = {}  # group id -> its records in the log

    def changed(self, group_id: str) -> int | None:
        """Writes the records of ``group_id`` that changed; the last offset written (None: nothing changed)."""
        group = self.coordinator.groups.get(group_id)
        now = group_records(self.coordinator, group) if group is not None else {}
        before = self.written.get(group_id, {})
        changes = [(k, v) for k, v in now.items() if before.get(k) != v]
        changes += [(k, None) for k in before if k not in now]
        if not changes:
            return None
        changes.sort(key=lambda kv: -struct.unpack_from(">h", kv[0], 0)[0])  # one batch: written all or none
        ts = int(time.time() * 1000)
        result = self.offsets.partition.append(encode_batch([(k, v, ts) for k, v in changes]))
        if now:
            self.written[group_id] = now
        else:
            self.written.pop(group_id, None)
        return result.last_offset


def read(partition) -> dict[str, dict[bytes, bytes]]:
    """The consumer groups' live records in the log, to its end: group id -> {key: value} (tombstoned keys gone)."""
    found: dict[str, dict[bytes, bytes]] = {}
    for header, batch in batches_below(partition, partition.log_end_offset):
        if header.is_control or header.is_transactional:
            continue
        for record in decode_records(batch):
            decoded = decode_key(record.key) if record.key else None
            if decoded is None:
                continue
            records = found.setdefault(decoded[1], {})
            if record.value is None:
                records.pop(bytes(record.key), None)
            else:
                records[bytes(record.key)] = bytes(record.value)
    return {g: r for g, r in found.items() if r}


def _assignment(pairs, names: dict[uuid.UUID, str]) -> Assignment:
    return {names[t]: frozenset(ps) for t, ps in pairs if t in names and ps}


def restore(store: ConsumerGroupStore, found: dict[str, dict[bytes, bytes]]) -> int:
    """Takes over the groups of the records (``read``): epochs, target assignment, members with their epochs and
    partitions, each member's session (and revocation) counting from now. Returns how many members."""
    coordinator = store.coordinator
    names = {topic.topic_id: name for name in coordinator.topics.names()
             if (topic := coordinator.topics.get(name)) is not None}
    now = time.monotonic()
    members = 0
    store.written = dict(found)  # what the log holds: the next change of a group tombstones what it no longer has
    for group_id in [g for g in coordinator.groups if g not in found]:
        # held from an earlier tenure, deleted or emptied since by another coordinator: the log is what the group is
        del coordinator.groups[group_id]
    for group_id, records in found.items():
        parts: dict[int, dict] = {}
        per_member: dict[str, dict[int, dict]] = {}
        for key, value in records.items():
            kind, _, member_id = decode_key(key)
            decoded = decode_value(kind, value)
            if member_id is None:
                parts[kind] = decoded
            else:
                per_member.setdefault(member_id, {})[kind] = decoded
        if GROUP not in parts:
            coordinator.groups.pop(group_id, None)
            continue  # a group's record is written last: without it, the group was never complete
        group = ConsumerGroup(group_id, epoch=parts[GROUP]["epoch"],
                              assignment_epoch=parts.get(TARGET, {"assignment_epoch": 0})["assignment_epoch"],
                              assignor=coordinator.settings.default_assignor)
        group.topics_seen = tuple(sorted((t["name"], t["partitions"])
                                         for t in parts.get(PARTITIONS, {"topics": []})["topics"]))
        for member_id, kinds in per_member.items():
            meta, current = kinds.get(MEMBER), kinds.get(CURRENT)
            if meta is None or current is None:
                continue
            m = ConsumerMember(member_id, meta["instance_id"], meta["rack_id"], meta["client_id"] or "",
                               meta["client_host"] or "", meta["rebalance_timeout_ms"],
                               subscribed_names=tuple(meta["subscribed_names"]),
                               subscribed_regex=meta["subscribed_regex"], server_assignor=meta["server_assignor"],
                               epoch=current["epoch"], previous_epoch=current["previous_epoch"],
                               state=_CODE_STATES.get(current["state"], MEMBER_STABLE),
                               assigned=_assignment(current["assigned"], names),
                               pending_revocation=_assignment(current["pending_revocation"], names), last_seen=now)
            if m.state == UNREVOKED:
                m.revocation_deadline = now + m.rebalance_timeout_ms / 1000
            group.members[member_id] = m
            if TARGET_MEMBER in kinds:
                group.target[member_id] = _assignment(kinds[TARGET_MEMBER]["partitions"], names)
        chosen = [m.server_assignor for m in group.members.values() if m.server_assignor]
        if chosen:
            group.assignor = max(sorted(set(chosen)), key=chosen.count)
        coordinator.groups[group_id] = group
        members += len(group.members)
    coordinator.taken_over()
    return members

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


def _topic_partitions(assignment: Assignment, ids: dict[str, uuid.UUID | None]) -> bytes:
    """A topic with no id (None, or not in ``ids``: gone from the metadata) is left out."""
    return _carray([topic_id.bytes + _carray([struct.pack(">i", p) for p in sorted(ps)]) + _NO_TAGS
                    for t, ps in sorted(assignment.items()) if (topic_id := ids.get(t)) is not None])


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


def _topic_ids(coordinator: ConsumerGroupCoordinator, names) -> dict[str, uuid.UUID | None]:
    return {t: None if (topic := coordinator.topics.get(t)) is None else topic.topic_id for t in names}


def _group_values(group: ConsumerGroup, ids: dict[str, uuid.UUID | None]) -> dict[bytes, bytes]:
    """The group's own records: its epoch, subscribed topics and assignment epoch."""
    gid = group.group_id
    return {
        _key(GROUP, gid): _value(struct.pack(">i", group.epoch)),
        _key(PARTITIONS, gid): _value(_carray([
            topic_id.bytes + _cstring(t) + struct.pack(">i", n) + _carray([]) + _NO_TAGS
            for t, n in group.topics_seen if (topic_id := ids.get(t)) is not None])),
        _key(TARGET, gid): _value(struct.pack(">i", group.assignment_epoch)),
    }


def _member_value(m: ConsumerMember) -> bytes:
    return _value(_cstring(m.instance_id), _cstring(m.rack_id), _cstring(m.client_id), _cstring(m.client_host),
                  _carray([_cstring(t) for t in m.subscribed_names]), _cstring(m.subscribed_regex),
                  struct.pack(">i", m.rebalance_timeout_ms), _cstring(m.server_assignor))


def _target_value(target: Assignment, ids: dict[str, uuid.UUID | None]) -> bytes:
    return _value(_topic_partitions(target, ids))


def _current_value(m: ConsumerMember, ids: dict[str, uuid.UUID | None]) -> bytes:
    return _value(struct.pack(">iib", m.epoch, m.previous_epoch, _STATE_CODES[m.state]),
                  _topic_partitions(m.assigned, ids), _topic_partitions(m.pending_revocation, ids))


def _member_topics(group: ConsumerGroup, m: ConsumerMember) -> set[str]:
    return {*group.target.get(m.member_id, ()), *m.assigned, *m.pending_revocation}


def _group_topics(group: ConsumerGroup) -> set[str]:
    return {t for t, _ in group.topics_seen}.union(*(_member_topics(group, m) for m in group.members.values()))


def _fingerprints(group: ConsumerGroup, m: ConsumerMember) -> tuple:
    """What each of a member's three records is encoded from (with the topics' ids): equal fingerprints, equal
    records. The assignments are copied (their sets are frozen): a dict changed in place is not taken for equal."""
    return ((m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_names, m.subscribed_regex,
             m.rebalance_timeout_ms, m.server_assignor),
            dict(group.target.get(m.member_id, {})),
            (m.epoch, m.previous_epoch, m.state, dict(m.assigned), dict(m.pending_revocation)))


def group_records(coordinator: ConsumerGroupCoordinator, group: ConsumerGroup,
                  ids: dict[str, uuid.UUID | None] | None = None) -> dict[bytes, bytes]:
    """Every record (key -> value) that describes ``group`` now (``ids``: its topics' ids, if looked up already)."""
    if ids is None:
        ids = _topic_ids(coordinator, _group_topics(group))
    gid = group.group_id
    records = _group_values(group, ids)
    for m in group.members.values():
        mid = m.member_id
        records[_key(MEMBER, gid, mid)] = _member_value(m)
        records[_key(TARGET_MEMBER, gid, mid)] = _target_value(group.target.get(mid, {}), ids)
        records[_key(CURRENT, gid, mid)] = _current_value(m, ids)
    return records


class _Encoded:
    """What a store last wrote of one group object, to re-encode only what changed: the group's own fingerprint,
    each member's (``_fingerprints``), and the id of every topic the records name (one changed: all again)."""

    def __init__(self, group: ConsumerGroup, ids: dict[str, uuid.UUID | None]) -> None:
        self.group = group  # this object: a group deleted and made again, or restored, is encoded whole
        self.ids = ids
        self.head = _head(group)
        self.members = {mid: _fingerprints(group, m) for mid, m in group.members.items()}


def _head(group: ConsumerGroup) -> tuple:
    return group.epoch, group.assignment_epoch, group.topics_seen


class ConsumerGroupStore:
    """Writes what changed of a coordinator's consumer groups to ``__consumer_offsets`` (``changed``, its
    ``on_change``), remembering what the log holds of each group (primed by ``restore``).

    A heartbeat that changes nothing costs no encoding: the coordinator names the members it may have changed
    (``ConsumerGroup.touched``: the heartbeating member, one that joined, left or expired, every member when the
    target assignment is computed); of those, only a member whose fingerprint moved is encoded again, and the
    group's three records when its epochs or subscribed topics did. A group seen for the first time (a takeover,
    a failed write, a topic's id changed) is encoded whole and diffed against the log, as every group was."""

    def __init__(self, coordinator: ConsumerGroupCoordinator, offsets) -> None:
        self.coordinator, self.offsets = coordinator, offsets
        self.written: dict[str, dict[bytes, bytes]] = {}  # group id -> its records in the log
        self.encoded: dict[str, _Encoded] = {}  # group id -> what was encoded of it (written or already there)

    def forget(self) -> None:
        """The groups are replaced (a takeover): each is encoded whole next time."""
        self.encoded.clear()

    def changed(self, group_id: str) -> int | None:
        """Writes the records of ``group_id`` that changed; the last offset written (None: nothing changed)."""
        group = self.coordinator.groups.get(group_id)
        touched = group.touched if group is not None else {}
        if group is not None:
            group.touched = {}
        try:
            return self._write(group_id, group, touched)
        except Exception:
            self.encoded.pop(group_id, None)  # not known to be in the log: encoded whole next time
            raise

    def _write(self, group_id: str, group: ConsumerGroup | None, touched: dict[str, None]) -> int | None:
        before = self.written.get(group_id, {})
        encoded = self.encoded.get(group_id)
        if encoded is not None and (encoded.group is not group
                                    or encoded.ids != _topic_ids(self.coordinator, encoded.ids)):
            encoded = None  # another group object (restored, made again), or a topic's id changed
        if group is None:
            changes = [(k, None) for k in before]
            after = {}
        elif encoded is None:
            ids = _topic_ids(self.coordinator, _group_topics(group))
            after = group_records(self.coordinator, group, ids)
            changes = [(k, v) for k, v in after.items() if before.get(k) != v]
            changes += [(k, None) for k in before if k not in after]
            encoded = _Encoded(group, ids)
        else:
            changes, after = self._changes(group, encoded, touched, before), None
        if changes:
            changes.sort(key=lambda kv: -struct.unpack_from(">h", kv[0], 0)[0])  # one batch: written all or none
            ts = int(time.time() * 1000)
            result = self.offsets.partition.append(encode_batch([(k, v, ts) for k, v in changes]))
        if group is None:
            self.written.pop(group_id, None)
            self.encoded.pop(group_id, None)
        else:
            if after is None:  # only what changed: the log's image is brought up to date in place
                after = before
                for k, v in changes:
                    if v is None:
                        after.pop(k, None)
                    else:
                        after[k] = v
            self.written[group_id] = after
            self.encoded[group_id] = encoded
        return result.last_offset if changes else None

    def _changes(self, group: ConsumerGroup, encoded: _Encoded, touched: dict[str, None],
                 before: dict[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
        """The records of ``touched`` members and of the group that differ from the log (``encoded`` brought up to
        date: called only when they are written, or nothing is to be)."""
        gid, ids = group.group_id, encoded.ids
        candidates: list[tuple[bytes, bytes | None]] = []
        head = _head(group)
        if head != encoded.head:
            if group.topics_seen != encoded.head[2]:
                ids.update(_topic_ids(self.coordinator, [t for t, _ in group.topics_seen if t not in ids]))
            candidates += _group_values(group, ids).items()
            encoded.head = head
        for mid in touched:
            m = group.members.get(mid)
            keys = (_key(MEMBER, gid, mid), _key(TARGET_MEMBER, gid, mid), _key(CURRENT, gid, mid))
            if m is None:
                encoded.members.pop(mid, None)
                candidates += [(k, None) for k in keys if k in before]
                continue
            now = _fingerprints(group, m)
            was = encoded.members.get(mid, (None, None, None))
            if now == was:
                continue
            encoded.members[mid] = now
            if now[1] != was[1] or now[2] != was[2]:
                ids.update(_topic_ids(self.coordinator, [t for t in _member_topics(group, m) if t not in ids]))
            if now[0] != was[0]:
                candidates.append((keys[0], _member_value(m)))
            if now[1] != was[1]:
                candidates.append((keys[1], _target_value(group.target.get(mid, {}), ids)))
            if now[2] != was[2]:
                candidates.append((keys[2], _current_value(m, ids)))
        return [(k, v) for k, v in candidates if before.get(k) != v]


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
    # what the log holds (copied: kept up to date in place); the next change of a group tombstones what it no
    # longer has
    store.written = {g: dict(records) for g, records in found.items()}
    store.forget()
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

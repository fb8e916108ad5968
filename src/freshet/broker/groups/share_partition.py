"""One share-partition: a share group's view of one topic partition (KIP-932), as a queue.

Records between the start offset (SPSO) and the end offset (SPEO) are *in flight*; each has a state
and a delivery count:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--> ACKNOWLEDGED
        ^                     |  \\--REJECT / GAP--> ARCHIVED
        +--RELEASE, lock expiry, member gone (delivery count < limit; else ARCHIVED)

A fetch acquires available records for one member with a lock (``record_lock_ms``): first the
in-flight ones that came back (released, expired), then new ones from the end offset, up to the fetch's
``max_records`` and while fewer than ``max_record_locks`` records are in flight. The start offset moves past every
record that is acknowledged or archived, so the window slides along the log as the queue drains.

This object owns the queue's one guarantee: a record is ACQUIRED by at most one member at a time, and an
acknowledgement that names anything else (an offset outside the window, a record another member holds,
one in another state) changes nothing and is answered INVALID_RECORD_STATE. It does no I/O of its own
beyond reading batches from the log partition; the coordinator persists ``snapshot()`` after changes.

The window is kept as parallel arrays indexed by ``offset - start_offset`` (states and delivery counts in
bytearrays, owners and lock deadlines in lists), so that acquiring, acknowledging and sliding a run of
records are slice operations rather than a Python step per record, and a snapshot is two byte strings.
Offsets in the window that hold no record (transaction markers, gaps a compaction left) are ARCHIVED.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from freshet.format.record_batch import iter_batches
from freshet.log import OffsetOutOfRangeError, Partition

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
STATE_NAMES = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)
_READ_BYTES = 1 << 20
_COVER_BYTES = 1 << 16  # reads for redelivered records: usually a batch or two each
_FINAL = (ACKNOWLEDGED, ARCHIVED)


class AcknowledgeError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class InFlight:
    """One record of the window, as ``SharePartition.record`` shows it. ``member`` only while ACQUIRED."""

    state: int
    delivery_count: int
    member: str | None


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


_BYTE = [bytes([i]) for i in range(256)]
_TO_AVAILABLE = bytes(AVAILABLE if i == ACQUIRED else i for i in range(256))  # translate table for recovery


class SharePartition:
    def __init__(self, log: Partition, start_offset: int) -> None:
        self.log = log
        self.start_offset = start_offset
        self.end_offset = start_offset
        self._state = bytearray()  # per offset in [start, end)
        self._count = bytearray()  # delivery counts (at most 255: the limit is 10 at most)
        self._owner: list[str | None] = []
        self._deadline: list[float] = []
        self._available = 0  # how many AVAILABLE records the window holds (released, expired)
        self.earliest_deadline = float("inf")
        self.archived_total = 0  # records ever archived: rejected, or past the delivery count limit
        self.leader_epoch: int | None = None  # cluster mode: the partition's leader epoch it was loaded in
        self.state_epoch = 0  # cluster mode: the share coordinator's state epoch it was loaded in
        self.stored = False  # cluster mode: loaded from the share coordinator, or written there since

    # -- what the state is -----------------------------------------------------------------

    def record(self, offset: int) -> InFlight | None:
        i = offset - self.start_offset
        if not 0 <= i < len(self._state):
            return None
        state = self._state[i]
        return InFlight(state, self._count[i], self._owner[i] if state == ACQUIRED else None)

    def counts(self) -> dict[str, int]:
        return {name: self._state.count(_BYTE[state]) for state, name in STATE_NAMES.items()}

    def snapshot(self) -> dict:
        """Durable form: the window's offsets, each record's state and delivery count (base64 bytes, one per
        offset). ACQUIRED is kept as such so that tools can see what is in flight; on recovery it is AVAILABLE."""
        return {"start_offset": self.start_offset, "end_offset": self.end_offset,
                "states": base64.b64encode(self._state).decode(), "counts": base64.b64encode(self._count).decode(),
                "archived_total": self.archived_total}

    @classmethod
    def restore(cls, log: Partition, snapshot: dict) -> SharePartition:
        """After a restart: what was acquired is available again (its lock died with the broker); the owner then
        calls ``archive_exhausted`` with the group's delivery count limit."""
        sp = cls(log, int(snapshot["start_offset"]))
        states = base64.b64decode(snapshot.get("states", "")).translate(_TO_AVAILABLE)
        counts = base64.b64decode(snapshot.get("counts", ""))
        if len(counts) != len(states):
            raise ValueError("a share-partition snapshot whose states and counts differ in length")
        sp._state, sp._count = bytearray(states), bytearray(counts)
        sp._owner, sp._deadline = [None] * len(states), [0.0] * len(states)
        sp.end_offset = sp.start_offset + len(states)
        sp._available = states.count(_BYTE[AVAILABLE])
        sp.archived_total = int(snapshot.get("archived_total", 0))
        sp.stored = True
        sp._advance()
        return sp

    # -- acquiring -------------------------------------------------------------------------

    def acquire(self, member: str, max_records: int, max_bytes: int, lock_ms: int, max_record_locks: int,
                upper: int, now: float, read_committed: bool = False) -> tuple[list[Acquired], bytes]:
        """Lock up to ``max_records`` for ``member``: the acquired ranges and the record batches that hold them, in
        offset order (whole batches: the client keeps the acquired offsets). ``upper``: the high watermark, or
        for ``read_committed`` the last stable offset (records of aborted transactions are then nobody's)."""
        self._skip_deleted()
        deadline = now + lock_ms / 1000
        ranges: list[Acquired] = []
        batches: dict[int, bytes] = {}
        taken = 0
        if self._available and max_records > 0:  # records that came back first, in log order
            taken = self._reacquire(member, max_records, deadline, ranges)
            self._read_covering(ranges, upper, batches)
        read_bytes = 0
        while (taken < max_records and self.end_offset < upper
               and self.end_offset - self.start_offset < max_record_locks and read_bytes < max_bytes):
            try:
                data = self.log.read(self.end_offset, min(_READ_BYTES, max_bytes - read_bytes), upper)
            except OffsetOutOfRangeError:
                break
            if not data:
                break
            for header, batch in iter_batches(data):
                last = header.last_offset
                if last < self.end_offset:
                    continue
                if header.base_offset > self.end_offset:  # offsets no batch holds (compacted away)
                    self._extend(header.base_offset - self.end_offset, ARCHIVED, 0, None, 0.0)
                first = max(header.base_offset, self.end_offset)
                if header.is_control or (read_committed and header.is_transactional and self._aborted(header)):
                    # transaction markers are nobody's record, nor (read_committed) an aborted transaction's
                    self._extend(last - first + 1, ARCHIVED, 0, None, 0.0)
                else:
                    # at most max_records: a batch may be cut (the client keeps only the acquired offsets of it)
                    last = min(last, first + max_records - taken - 1, self.start_offset + max_record_locks - 1)
                    n = last - first + 1
                    self._extend(n, ACQUIRED, 1, member, deadline)
                    if ranges and ranges[-1].last_offset == first - 1 and ranges[-1].delivery_count == 1:
                        ranges[-1] = Acquired(ranges[-1].first_offset, last, 1)
                    else:
                        ranges.append(Acquired(first, last, 1))
                    taken += n
                    batches[header.base_offset] = bytes(batch)
                    read_bytes += len(batch)
                self.end_offset = last + 1
                if taken >= max_records or self.end_offset - self.start_offset >= max_record_locks \
                        or read_bytes >= max_bytes:
                    break
        if ranges:
            self.earliest_deadline = min(self.earliest_deadline, deadline)
        self._advance()
        return ranges, b"".join(batches[base] for base in sorted(batches))

    def _aborted(self, header) -> bool:
        return any(a.producer_id == header.producer_id and a.first_offset <= header.base_offset < a.last_offset
                   for a in self.log.aborted_transactions(header.base_offset, header.last_offset + 1))

    def _extend(self, n: int, state: int, count: int, member: str | None, deadline: float) -> None:
        self._state += _BYTE[state] * n
        self._count += _BYTE[count] * n
        self._owner += [member] * n
        self._deadline += [deadline] * n

    def _reacquire(self, member: str, max_records: int, deadline: float, ranges: list[Acquired]) -> int:
        state, count = self._state, self._count
        available = _BYTE[AVAILABLE]
        taken = 0
        i = state.find(available)
        while i >= 0 and taken < max_records:
            state[i] = ACQUIRED
            count[i] = min(count[i] + 1, 255)
            self._owner[i] = member
            self._deadline[i] = deadline
            offset = self.start_offset + i
            if ranges and ranges[-1].last_offset == offset - 1 and ranges[-1].delivery_count == count[i]:
                ranges[-1] = Acquired(ranges[-1].first_offset, offset, count[i])
            else:
                ranges.append(Acquired(offset, offset, count[i]))
            taken += 1
            i = state.find(available, i + 1)
        self._available -= taken
        return taken

    def _read_covering(self, ranges: list[Acquired], upper: int, batches: dict[int, bytes]) -> None:
        """The batches that hold ``ranges`` (in offset order), each once."""
        for r in ranges:
            offset = r.first_offset
            while offset <= r.last_offset:
                try:
                    data = self.log.read(offset, _COVER_BYTES, upper)
                except OffsetOutOfRangeError:
                    return
                if not data:
                    return
                for header, batch in iter_batches(data):
                    if header.last_offset < offset:
                        continue
                    if header.base_offset > r.last_offset:
                        break
                    if not header.is_control:
                        batches.setdefault(header.base_offset, bytes(batch))
                    offset = header.last_offset + 1
                    if offset > r.last_offset:
                        break

    # -- acknowledging ---------------------------------------------------------------------

    def check(self, member: str, batches: list[tuple[int, int, tuple[int, ...]]]) -> None:
        """Raise AcknowledgeError unless every record ``batches`` names is ACQUIRED by ``member`` (nothing changes)."""
        previous_last = -1
        acquired = _BYTE[ACQUIRED]
        for first, last, types in sorted(batches):
            if first < 0 or last < first:
                raise AcknowledgeError(ErrorCode.invalid_request, f"bad acknowledgement range {first}..{last}")
            if not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AcknowledgeError(ErrorCode.invalid_request,
                                       f"{len(types)} acknowledge types for {last - first + 1} records")
            if any(t not in ACK_TYPES for t in types):
                raise AcknowledgeError(ErrorCode.invalid_request, f"unknown acknowledge type in {list(types)}")
            if first <= previous_last:
                raise AcknowledgeError(ErrorCode.invalid_request, f"offset {first} acknowledged twice")
            previous_last = last
            i, j = first - self.start_offset, last - self.start_offset + 1
            if i < 0 or j > len(self._state) or self._state.count(acquired, i, j) != j - i:
                raise AcknowledgeError(ErrorCode.invalid_record_state,
                                       f"records {first}..{last} are not all in flight and acquired")
            if self._owner[i:j].count(member) != j - i:
                raise AcknowledgeError(ErrorCode.invalid_record_state,
                                       f"records {first}..{last} are not all acquired by this member")

    def acknowledge(self, member: str, batches: list[tuple[int, int, tuple[int, ...]]], delivery_count_limit: int,
                    lock_ms: int, now: float) -> None:
        """Apply acknowledgements, all or nothing (``check`` first)."""
        self.check(member, batches)
        for first, last, types in batches:
            i, j = first - self.start_offset, last - self.start_offset + 1
            if len(types) == 1:
                self._apply(i, j, types[0], delivery_count_limit, lock_ms, now)
            else:
                for k, kind in enumerate(types):
                    self._apply(i + k, i + k + 1, kind, delivery_count_limit, lock_ms, now)
        self._advance()

    def _apply(self, i: int, j: int, kind: int, delivery_count_limit: int, lock_ms: int, now: float) -> None:
        n = j - i
        if kind == ACCEPT:
            self._state[i:j] = _BYTE[ACKNOWLEDGED] * n
            self._owner[i:j] = [None] * n
        elif kind in (REJECT, GAP):
            self._state[i:j] = _BYTE[ARCHIVED] * n
            self._owner[i:j] = [None] * n
            if kind == REJECT:
                self.archived_total += n
        elif kind == RELEASE:
            for k in range(i, j):
                self._release(k, delivery_count_limit)
        else:  # RENEW: the lock starts again
            deadline = now + lock_ms / 1000
            self._deadline[i:j] = [deadline] * n
            self.earliest_deadline = min(self.earliest_deadline, deadline)

    def release_member(self, member: str, delivery_count_limit: int) -> int:
        """Everything ``member`` holds becomes available again (it left, or its session ended)."""
        released = 0
        for i, owner in enumerate(self._owner):
            if owner == member and self._state[i] == ACQUIRED:
                self._release(i, delivery_count_limit)
                released += 1
        if released:
            self._advance()
        return released

    def expire_locks(self, now: float, delivery_count_limit: int) -> int:
        """Locks past their deadline let go; returns how many."""
        if now < self.earliest_deadline:
            return 0
        expired = 0
        earliest = float("inf")
        acquired = _BYTE[ACQUIRED]
        i = self._state.find(acquired)
        while i >= 0:
            if self._deadline[i] <= now:
                self._release(i, delivery_count_limit)
                expired += 1
            else:
                earliest = min(earliest, self._deadline[i])
            i = self._state.find(acquired, i + 1)
        self.earliest_deadline = earliest
        if expired:
            self._advance()
        return expired

    def _release(self, i: int, delivery_count_limit: int) -> None:
        self._owner[i] = None
        if self._count[i] >= delivery_count_limit:
            self._state[i] = ARCHIVED  # the poison-message rule: delivered too often, never again
            self.archived_total += 1
        else:
            self._state[i] = AVAILABLE
            self._available += 1

    def archive_exhausted(self, delivery_count_limit: int) -> int:
        """Archive the available records already delivered ``delivery_count_limit`` times, as releasing them
        would have: those acquired when the broker stopped (``restore`` makes them available), or all of them
        once the limit is lowered. Returns how many."""
        archived = 0
        for i, count in enumerate(self._count):
            if count >= delivery_count_limit and self._state[i] == AVAILABLE:
                self._state[i] = ARCHIVED
                self._available -= 1
                archived += 1
        if archived:
            self.archived_total += archived
            self._advance()
        return archived

    # -- moving the window -----------------------------------------------------------------

    def reset(self, start_offset: int) -> None:
        """AlterShareGroupOffsets (the group has no members): the window starts afresh at ``start_offset``."""
        self.start_offset = self.end_offset = start_offset
        self._drop(len(self._state))
        self.earliest_deadline = float("inf")

    def _skip_deleted(self) -> None:
        """Retention deleted records below the log start: they leave the window unread."""
        log_start = self.log.log_start_offset
        if self.start_offset < log_start:
            self._drop(min(log_start - self.start_offset, len(self._state)))
            self._available = self._state.count(_BYTE[AVAILABLE])
            self.start_offset = log_start
            self.end_offset = max(self.end_offset, log_start)

    def _drop(self, k: int) -> None:
        del self._state[:k], self._count[:k], self._owner[:k], self._deadline[:k]

    def _advance(self) -> None:
        """The start offset moves past the acknowledged and archived records at the front of the window."""
        state = self._state
        k = len(state)
        for pending in (_BYTE[AVAILABLE], _BYTE[ACQUIRED]):
            found = state.find(pending, 0, k)
            if found >= 0:
                k = found
        if k:
            self._drop(k)
            self.start_offset += k

    @property
    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

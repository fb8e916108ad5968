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
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from freshet.log import OffsetOutOfRangeError, Partition
from freshet.log.record_batch import iter_batches

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
STATE_NAMES = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)
_READ_BYTES = 1 << 20
_FINAL = (ACKNOWLEDGED, ARCHIVED)


class AcknowledgeError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class InFlight:
    """One record in the window. ``member``/``deadline`` only while ACQUIRED."""

    state: int
    delivery_count: int = 0
    member: str | None = None
    deadline: float = 0.0


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    def __init__(self, log: Partition, start_offset: int) -> None:
        self.log = log
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}
        self.available: list[int] = []  # sorted offsets in the window that are AVAILABLE again
        self.earliest_deadline = float("inf")
        self.archived_total = 0  # records ever archived: rejected, or past the delivery count limit

    # -- what the state is -----------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        out = {name: 0 for name in STATE_NAMES.values()}
        for r in self.records.values():
            out[STATE_NAMES[r.state]] += 1
        return out

    def snapshot(self) -> dict:
        """Durable form: start/end offsets and runs ``[first, last, state, delivery_count]`` of the window's
        records (ACQUIRED is kept as such so that tools can see what is in flight; on recovery it is AVAILABLE)."""
        runs: list[list[int]] = []
        for offset in sorted(self.records):
            r = self.records[offset]
            if runs and runs[-1][1] == offset - 1 and runs[-1][2] == r.state and runs[-1][3] == r.delivery_count:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset, r.state, r.delivery_count])
        return {"start_offset": self.start_offset, "end_offset": self.end_offset, "runs": runs,
                "archived_total": self.archived_total}

    @classmethod
    def restore(cls, log: Partition, snapshot: dict) -> "SharePartition":
        """After a restart: what was acquired is available again (its lock died with the broker)."""
        sp = cls(log, int(snapshot["start_offset"]))
        sp.end_offset = max(int(snapshot.get("end_offset", sp.start_offset)), sp.start_offset)
        sp.archived_total = int(snapshot.get("archived_total", 0))
        for first, last, state, count in snapshot.get("runs", ()):
            if state == ACQUIRED:
                state = AVAILABLE
            for offset in range(max(first, sp.start_offset), last + 1):
                sp.records[offset] = InFlight(state, count)
                if state == AVAILABLE:
                    sp.available.append(offset)
        sp.available.sort()
        sp._advance()
        return sp

    # -- acquiring -------------------------------------------------------------------------

    def acquire(self, member: str, max_records: int, max_bytes: int, lock_ms: int, max_record_locks: int,
                upper: int, now: float) -> tuple[list[Acquired], bytes]:
        """Lock up to ``max_records`` for ``member``: the acquired ranges and the record batches that hold them, in
        offset order (whole batches: the client keeps the acquired offsets). ``upper``: the high watermark or LSO."""
        self._skip_deleted()
        deadline = now + lock_ms / 1000
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        batches: dict[int, bytes] = {}
        # records that came back first: their order in the log is kept
        if self.available and max_records > 0:
            take, self.available = self.available[:max_records], self.available[max_records:]
            for offset in take:
                r = self.records[offset]
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                r.delivery_count += 1
                acquired.append((offset, r.delivery_count))
            self._read_covering([o for o, _ in acquired], upper, batches)
        # then new records from the end offset, whole batches
        read_bytes = 0
        while (len(acquired) < max_records and self.end_offset < upper
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
                first = max(header.base_offset, self.end_offset)
                if header.is_control:  # transaction markers are nobody's record
                    for offset in range(first, last + 1):
                        self.records[offset] = InFlight(ARCHIVED)
                else:
                    # at most max_records: a batch may be cut (the client keeps only the acquired offsets of it)
                    last = min(last, first + max_records - len(acquired) - 1,
                               self.start_offset + max_record_locks - 1)
                    for offset in range(first, last + 1):
                        self.records[offset] = InFlight(ACQUIRED, 1, member, deadline)
                        acquired.append((offset, 1))
                    batches[header.base_offset] = bytes(batch)
                    read_bytes += len(batch)
                self.end_offset = last + 1
                if (len(acquired) >= max_records or self.end_offset - self.start_offset >= max_record_locks
                        or read_bytes >= max_bytes):
                    break
        if acquired:
            self.earliest_deadline = min(self.earliest_deadline, deadline)
        self._advance()
        ranges = _ranges(sorted(acquired))
        return ranges, b"".join(batches[base] for base in sorted(batches))

    def _read_covering(self, offsets: list[int], upper: int, batches: dict[int, bytes]) -> None:
        """The batches that hold ``offsets`` (sorted), each once."""
        i = 0
        while i < len(offsets):
            offset = offsets[i]
            try:
                data = self.log.read(offset, _READ_BYTES, upper)
            except OffsetOutOfRangeError:
                return
            if not data:
                return
            last_read = offset
            for header, batch in iter_batches(data):
                if header.last_offset < offset:
                    continue
                if not header.is_control:
                    batches.setdefault(header.base_offset, bytes(batch))
                last_read = header.last_offset
                while i < len(offsets) and offsets[i] <= last_read:
                    i += 1
                if i >= len(offsets):
                    return
                if offsets[i] > header.last_offset + 1:
                    break  # jump ahead instead of reading every batch in between
            while i < len(offsets) and offsets[i] <= last_read:
                i += 1

    # -- acknowledging ---------------------------------------------------------------------

    def check(self, member: str, batches: list[tuple[int, int, tuple[int, ...]]]) -> None:
        """Raise AcknowledgeError unless every record ``batches`` names is ACQUIRED by ``member`` (nothing changes)."""
        seen: set[int] = set()
        for first, last, types in batches:
            if first < 0 or last < first:
                raise AcknowledgeError(ErrorCode.invalid_request, f"bad acknowledgement range {first}..{last}")
            if not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AcknowledgeError(ErrorCode.invalid_request,
                                       f"{len(types)} acknowledge types for {last - first + 1} records")
            if any(t not in ACK_TYPES for t in types):
                raise AcknowledgeError(ErrorCode.invalid_request, f"unknown acknowledge type in {list(types)}")
            for offset in range(first, last + 1):
                if offset in seen:
                    raise AcknowledgeError(ErrorCode.invalid_request, f"offset {offset} acknowledged twice")
                seen.add(offset)
                r = self.records.get(offset)
                if r is None or r.state != ACQUIRED:
                    state = "not in flight" if r is None else STATE_NAMES[r.state]
                    raise AcknowledgeError(ErrorCode.invalid_record_state, f"record {offset} is {state}")
                if r.member != member:
                    raise AcknowledgeError(ErrorCode.invalid_record_state,
                                           f"record {offset} is acquired by another member")

    def acknowledge(self, member: str, batches: list[tuple[int, int, tuple[int, ...]]], delivery_count_limit: int,
                    lock_ms: int, now: float) -> None:
        """Apply acknowledgements, all or nothing (``check`` first)."""
        self.check(member, batches)
        for first, last, types in batches:
            for offset in range(first, last + 1):
                kind = types[0] if len(types) == 1 else types[offset - first]
                r = self.records[offset]
                if kind == ACCEPT:
                    r.state, r.member = ACKNOWLEDGED, None
                elif kind in (REJECT, GAP):
                    r.state, r.member = ARCHIVED, None
                    self.archived_total += kind == REJECT
                elif kind == RELEASE:
                    self._release(offset, r, delivery_count_limit)
                else:  # RENEW: the lock starts again
                    r.deadline = now + lock_ms / 1000
                    self.earliest_deadline = min(self.earliest_deadline, r.deadline)
        self._advance()

    def release_member(self, member: str, delivery_count_limit: int) -> int:
        """Everything ``member`` holds becomes available again (it left, or its session ended)."""
        released = 0
        for offset, r in self.records.items():
            if r.state == ACQUIRED and r.member == member:
                self._release(offset, r, delivery_count_limit)
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
        for offset, r in self.records.items():
            if r.state != ACQUIRED:
                continue
            if r.deadline <= now:
                self._release(offset, r, delivery_count_limit)
                expired += 1
            else:
                earliest = min(earliest, r.deadline)
        self.earliest_deadline = earliest
        if expired:
            self._advance()
        return expired

    def _release(self, offset: int, r: InFlight, delivery_count_limit: int) -> None:
        r.member = None
        if r.delivery_count >= delivery_count_limit:
            r.state = ARCHIVED  # the poison-message rule: delivered too often, never again
            self.archived_total += 1
        else:
            r.state = AVAILABLE
            insort(self.available, offset)

    # -- moving the window -----------------------------------------------------------------

    def reset(self, start_offset: int) -> None:
        """AlterShareGroupOffsets (the group has no members): the window starts afresh at ``start_offset``."""
        self.start_offset = self.end_offset = start_offset
        self.records.clear()
        self.available.clear()
        self.earliest_deadline = float("inf")

    def _skip_deleted(self) -> None:
        """Retention deleted records below the log start: they leave the window unread."""
        log_start = self.log.log_start_offset
        if self.start_offset < log_start:
            for offset in [o for o in self.records if o < log_start]:
                del self.records[offset]
            self.available = [o for o in self.available if o >= log_start]
            self.start_offset = log_start
            self.end_offset = max(self.end_offset, log_start)

    def _advance(self) -> None:
        records = self.records
        start = self.start_offset
        while start < self.end_offset:
            r = records.get(start)
            if r is not None:
                if r.state not in _FINAL:
                    break
                del records[start]
            start += 1
        self.start_offset = start

    @property
    def in_flight(self) -> int:
        return self.end_offset - self.start_offset


def _ranges(acquired: list[tuple[int, int]]) -> list[Acquired]:
    """Consecutive offsets with one delivery count, as ranges."""
    out: list[Acquired] = []
    for offset, count in acquired:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = Acquired(out[-1].first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out

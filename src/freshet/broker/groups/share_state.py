"""The share coordinator's state (KIP-932): what ``__share_group_state`` says of each share-partition.

In a cluster the share-partition leader (the leader of the topic partition, which acquires and acknowledges records)
keeps its window in memory and persists it through the share coordinator, the leader of the replicated
``__share_group_state``: WriteShareGroupState after every change, ReadShareGroupState when it becomes the
partition's leader (InitializeShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary beside them).
This module is the coordinator's side: the latest value of every key of the topic, checked, written and read in
Kafka's terms (a start offset and state batches: runs of offsets with one delivery state and delivery count). The
records are the one-node broker's own (``["partition", group, topic, index]`` keys, a snapshot of
``SharePartition`` as value), so the one topic serves both.

Leader epochs fence a deposed share-partition leader, as Kafka's coordinator does: a write or read names the
leader epoch of the partition it was made in, and one older than the newest seen for the key is refused
(FENCED_LEADER_EPOCH), so a leader that lost the partition cannot write its stale window over the new leader's.
"""

from __future__ import annotations

import base64
import logging

import orjson
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import decode_records

from .offsets import batches_below

log = logging.getLogger(__name__)

STATES = (0, 1, 2, 4)  # Kafka's RecordState: AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED (share_partition's too)
MAX_WINDOW = 1 << 20  # offsets a share-partition's state may span (its leader keeps max.record.locks of them)


class StateError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def group_key(group_id: str) -> bytes:
    return orjson.dumps(["group", group_id])


def partition_key(group_id: str, topic: str, partition: int) -> bytes:
    return orjson.dumps(["partition", group_id, topic, partition])


def to_batches(value: dict) -> list[tuple[int, int, int, int]]:
    """A stored window as Kafka's state batches: (first offset, last offset, delivery state, delivery count) runs."""
    start = int(value["start_offset"])
    states = base64.b64decode(value.get("states", ""))
    counts = base64.b64decode(value.get("counts", ""))
    out: list[tuple[int, int, int, int]] = []
    for i, (state, count) in enumerate(zip(states, counts)):
        if out and out[-1][2] == state and out[-1][3] == count and out[-1][1] == start + i - 1:
            out[-1] = (out[-1][0], start + i, state, count)
        else:
            out.append((start + i, start + i, state, count))
    return out


def from_batches(start_offset: int, batches) -> dict:
    """A window from a start offset and state batches, checked (StateError INVALID_REQUEST): runs in order, not
    overlapping, known states, delivery counts 0..32767, the window at most ``MAX_WINDOW`` offsets. Offsets below
    the start offset are dropped, offsets between batches are AVAILABLE and never delivered. Start offset -1 (Kafka:
    not being written): the batches alone, merged into the stored window when written (``ShareStateStore.write``)."""
    if start_offset < -1:
        raise StateError(ErrorCode.invalid_request, f"start offset {start_offset} is negative")
    checked = []
    previous = -1
    for first, last, state, count in batches:
        if last < first or first <= previous:
            raise StateError(ErrorCode.invalid_request, f"state batch {first}..{last} out of order or overlapping")
        if state not in STATES or not 0 <= count <= 0x7FFF:
            raise StateError(ErrorCode.invalid_request, f"state batch {first}..{last}: state {state}, count {count}")
        previous = last
        checked.append((first, last, state, count))
    if start_offset == -1:
        return {"start_offset": -1, "batches": checked}
    return _laid(start_offset, b"", b"", checked)


def _merged(old: dict | None, batches) -> dict:
    """The stored window ``old`` with ``batches`` laid over it (a write that does not move the start offset)."""
    if old is None or int(old.get("start_offset", -1)) < 0:
        return {"start_offset": -1, "end_offset": -1, "states": "", "counts": ""}
    return _laid(int(old["start_offset"]), base64.b64decode(old.get("states", "")),
                 base64.b64decode(old.get("counts", "")), batches)


def _laid(start: int, states: bytes, counts: bytes, batches) -> dict:
    """The window at ``start`` of ``states`` and ``counts`` with ``batches`` (checked) laid over it: offsets below
    ``start`` dropped, the window grown to the last batch (offsets no batch names AVAILABLE, delivered 0 times)."""
    states, counts = bytearray(states), bytearray(counts)
    for first, last, state, count in batches:
        if last < start:
            continue
        first = max(first, start)
        if last + 1 - start > MAX_WINDOW:
            raise StateError(ErrorCode.invalid_request, f"state batches span more than {MAX_WINDOW} offsets")
        if last + 1 - start > len(states):
            grow = last + 1 - start - len(states)
            states += bytes(grow)
            counts += bytes(grow)
        n = last - first + 1
        states[first - start:last + 1 - start] = bytes([state]) * n
        counts[first - start:last + 1 - start] = bytes([min(count, 255)]) * n
    return {"start_offset": start, "end_offset": start + len(states), "states": base64.b64encode(states).decode(),
            "counts": base64.b64encode(counts).decode()}


class ShareStateStore:
    """The latest value of every key of ``__share_group_state`` (the coordinator's, or the one-node broker's).
    ``writer``: appends records to the topic (and ``apply``s them), for a read that moves a leader epoch on."""

    def __init__(self, writer=None) -> None:
        self.values: dict[bytes, bytes] = {}  # as stored: parsed when read
        self.leader_epochs: dict[bytes, int] = {}  # the newest leader epoch a read or write named, per key
        self.writer = writer

    def clear(self) -> None:
        self.values.clear()
        self.leader_epochs.clear()

    def load(self, partition, upper: int | None = None) -> None:
        """The compacted view of ``partition`` (its records to the high watermark, or to ``upper``: a new leader
        reads to its log end, what the ISR may have acknowledged), replacing what was held."""
        self.clear()
        for header, batch in partition.batches() if upper is None else batches_below(partition, upper):
            if header.is_control:
                continue
            for record in decode_records(batch):
                if record.key is None:
                    continue
                if record.value is None:
                    self.values.pop(record.key, None)
                else:
                    self.values[record.key] = bytes(record.value)
        for key in list(self.values):
            value = self.get(key)
            if value is None:
                del self.values[key]
            elif "leader_epoch" in value:
                self.leader_epochs[key] = int(value["leader_epoch"])

    def get(self, key: bytes) -> dict | None:
        raw = self.values.get(key)
        if raw is None:
            return None
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("skipping an unreadable record in __share_group_state")
            return None
        return value if isinstance(value, dict) else None

    def apply(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Records appended to the topic (the coordinator's own writes), as ``load`` would read them."""
        for key, value in records:
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value

    # -- the share coordinator's operations (keys 83-87) ---------------------------------------------------

    def _fence(self, key: bytes, leader_epoch: int) -> None:
        if leader_epoch >= 0:
            newest = self.leader_epochs.get(key, -1)
            if leader_epoch < newest:
                raise StateError(ErrorCode.fenced_leader_epoch,
                                 f"leader epoch {leader_epoch} is older than {newest}, which this share-partition "
                                 "was read or written in")
            self.leader_epochs[key] = leader_epoch

    def read(self, group_id: str, topic: str, topic_id: str, index: int, leader_epoch: int) -> dict | None:
        """The share-partition's stored window (None: never written, or written for another topic of the name),
        read by its leader in ``leader_epoch``: older leaders are fenced from then on, by the next coordinator too
        (a newer leader epoch is written to the topic, as Kafka's readStateAndMaybeUpdateLeaderEpoch does)."""
        key = partition_key(group_id, topic, index)
        newer = leader_epoch > self.leader_epochs.get(key, -1)
        self._fence(key, leader_epoch)
        value = self.get_partition(group_id, topic, topic_id, index)
        if newer and value is not None and self.writer is not None:
            self.writer([(key, orjson.dumps({**value, "leader_epoch": leader_epoch}))])
        return value

    def get_partition(self, group_id: str, topic: str, topic_id: str, index: int) -> dict | None:
        value = self.get(partition_key(group_id, topic, index))
        if value is None or value.get("topic_id") != topic_id:
            return None
        return value

    def write(self, group_id: str, topic: str, topic_id: str, index: int, leader_epoch: int, state_epoch: int,
              window: dict) -> tuple[bytes, bytes]:
        """The record that stores ``window`` (FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH first); the caller appends
        it and then ``apply``s it."""
        key = partition_key(group_id, topic, index)
        old = self.get(key)
        if old is not None and old.get("topic_id") != topic_id:
            old = None  # another topic of the name: its state is not this one's
        stored_epoch = int(old.get("state_epoch", 0)) if old is not None else 0
        if old is not None and state_epoch >= 0 and state_epoch < stored_epoch:
            raise StateError(ErrorCode.fenced_state_epoch, f"state epoch {state_epoch} is older than {stored_epoch}"
                             + (", in which the share-partition's state was deleted" if deleted(old) else ""))
        if old is not None and state_epoch < 0 and deleted(old):
            raise StateError(ErrorCode.fenced_state_epoch, f"the share-partition's state was deleted in state epoch "
                                                           f"{stored_epoch}; a write must name one")
        if window["start_offset"] == -1:  # not being written: the stored start offset, the batches laid over it
            window = _merged(old, window.get("batches", ()))
        self._fence(key, leader_epoch)
        value = dict(window)
        value["topic_id"] = topic_id
        value["leader_epoch"] = max(leader_epoch, self.leader_epochs.get(key, -1))
        value["state_epoch"] = state_epoch if state_epoch >= 0 else stored_epoch  # -1: not being written
        value.setdefault("archived_total", old.get("archived_total", 0) if old else 0)
        return key, orjson.dumps(value)

    def initialize(self, group_id: str, topic: str, topic_id: str, index: int, state_epoch: int,
                   start_offset: int) -> tuple[bytes, bytes]:
        """InitializeShareGroupState: the share-partition starts afresh at ``start_offset`` in ``state_epoch``
        (newer than the stored one: FENCED_STATE_EPOCH otherwise)."""
        if start_offset < -1:
            raise StateError(ErrorCode.invalid_request, f"start offset {start_offset}")
        key = partition_key(group_id, topic, index)
        old = self.get(key)
        if old is not None and old.get("topic_id") == topic_id and state_epoch <= int(old.get("state_epoch", 0)):
            raise StateError(ErrorCode.fenced_state_epoch,
                             f"state epoch {state_epoch} is not newer than {old.get('state_epoch')}")
        value = {"start_offset": start_offset, "end_offset": start_offset, "states": "", "counts": "",
                 "archived_total": 0, "topic_id": topic_id, "state_epoch": state_epoch,
                 "leader_epoch": self.leader_epochs.get(key, -1)}
        return key, orjson.dumps(value)

    def delete(self, group_id: str, topic: str, index: int) -> tuple[bytes, bytes] | None:
        """DeleteShareGroupState: the share-partition's state replaced by a deleted marker, no window in a state
        epoch newer than the stored one (None: nothing stored, or deleted already). Kafka's coordinator drops the
        state and refuses a write to a share-partition nobody initialized since (INVALID_REQUEST); here a leader's
        first write creates its state, so the marker is what fences a window of before the delete that a deposed
        leader, or one that has not read since, writes after it: FENCED_STATE_EPOCH, and the leader reads again
        (nothing, in the marker's state epoch) and starts afresh in that epoch."""
        key = partition_key(group_id, topic, index)
        self.leader_epochs.pop(key, None)
        old = self.get(key)
        if old is None or deleted(old):
            return None
        return key, orjson.dumps({"deleted": True, "topic_id": old.get("topic_id"), "start_offset": -1,
                                  "end_offset": -1, "states": "", "counts": "", "archived_total": 0,
                                  "state_epoch": int(old.get("state_epoch", 0)) + 1, "leader_epoch": -1})


def deleted(value: dict) -> bool:
    """A share-partition's stored value that is DeleteShareGroupState's marker (no window: see ``delete``)."""
    return bool(value.get("deleted"))

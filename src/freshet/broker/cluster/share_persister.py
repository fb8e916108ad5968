"""A share-partition leader's client of the share coordinator (KIP-932's persister), cluster mode.

The leader of a topic partition serves a share group's fetches and acknowledgements of it from a window in memory
(``SharePartition``); that window is durable in ``__share_group_state``, which the share coordinator (the leader of
that replicated topic) writes. This client writes each change there (WriteShareGroupState, key 85) and reads a
window back when this broker becomes the partition's leader (ReadShareGroupState, key 84), over the network, or in
process when this broker is the share coordinator itself. Writes of one share-partition are coalesced (the last
window holds every change before it) and sent in order by one task; a write's future is done once the coordinator's
ISR has it, and retried while the coordinator moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, a lost connection) for ``RETRY_S``; it fails with the coordinator's error otherwise
(FENCED_LEADER_EPOCH: a newer leader of the partition wrote or read it since).
"""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode

from ..groups.offsets import append_failure
from ..groups.share import SHARE_STATE_TOPIC
from ..groups.share_state import StateError, from_batches, to_batches
from ..replication.client import BrokerConnection

log = logging.getLogger(__name__)

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
RETRY_S = 30.0  # a write or read the coordinator has not taken within this fails COORDINATOR_NOT_AVAILABLE
APPEND_TIMEOUT_S = 30.0  # the ISR of __share_group_state has a write within this, or it fails
RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
             ErrorCode.request_timed_out, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append}


async def acknowledged(broker, offset: int) -> None:
    """Returns once ``__share_group_state`` up to ``offset`` is in its ISR (fsync'd, on one node); else StateError
    with the code the group and transaction coordinators answer (``append_failure``): NOT_COORDINATOR when this
    broker stopped leading it first, COORDINATOR_NOT_AVAILABLE when it could not be."""
    if offset < 0:
        return
    code = await append_failure(broker, SHARE_STATE_TOPIC, broker.share_groups.state, offset, APPEND_TIMEOUT_S)
    if code is not None:
        raise StateError(code, f"{SHARE_STATE_TOPIC} up to offset {offset} was not acknowledged")


def led_epoch(broker, topic: str, index: int) -> int | None:
    """The leader epoch in which this broker leads ``topic``/``index`` (None: it does not lead it)."""
    _, leader = broker.replicas.check(topic, index)
    state = broker.replicas.role(topic, index)
    return state.leader_epoch if leader is not None and state is not None else None


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()  # a write nobody waits on (an acquisition, an expired lock) fails quietly


class SharePersister:
    def __init__(self, broker) -> None:
        self.broker = broker
        # (group, topic, index) -> [topic_id, leader_epoch, state_epoch, window, futures, first written]
        self._pending: dict[tuple[str, str, int], list] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._connections: dict[str, BrokerConnection] = {}  # "read" / "write": one request at a time each
        self._locks: dict[str, asyncio.Lock] = {}

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for connection in self._connections.values():
            connection.close()

    def _local(self) -> bool:
        return self.broker.share_groups.coordinator_epoch is not None

    # -- writes ------------------------------------------------------------------------------------------

    def write(self, group_id: str, topic: str, topic_id, index: int, leader_epoch: int, state_epoch: int,
              window: dict) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fut.add_done_callback(_retrieve)
        key = (group_id, topic, index)
        old = self._pending.get(key)
        futures = old[4] if old is not None else []
        futures.append(fut)
        self._pending[key] = [topic_id, leader_epoch, state_epoch, window, futures,
                              old[5] if old is not None else time.monotonic()]
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name="share-state-writes")
        assert self._wake is not None
        self._wake.set()
        return fut

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, {}
                try:
                    retry = await self._send(batch)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("share-group state writes failed")
                    retry = batch
                now = time.monotonic()
                for key, entry in retry.items():
                    newer = self._pending.get(key)
                    if newer is not None:  # a later window of the share-partition holds this one's changes
                        newer[4][:0] = entry[4]
                        newer[5] = min(newer[5], entry[5])
                    elif now - entry[5] > RETRY_S:
                        _fail(entry[4], StateError(ErrorCode.coordinator_not_available,
                                                   f"no share coordinator took the write within {RETRY_S:.0f} s"))
                    else:
                        self._pending[key] = entry
                if retry:
                    await asyncio.sleep(0.1)

    async def _send(self, batch: dict) -> dict:
        """Write ``batch``; what is to be sent again (the coordinator moving), the rest done or failed."""
        if self._local():
            return await self._write_here(batch)
        by_group: dict[str, dict] = {}
        for (group_id, topic, index), (topic_id, leader_epoch, state_epoch, window, _, _) in batch.items():
            topics = by_group.setdefault(group_id, {})
            topics.setdefault(topic_id, []).append({
                "partition": index, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
                "start_offset": window["start_offset"], "delivery_complete_count": -1,
                "state_batches": [{"first_offset": f, "last_offset": t, "delivery_state": s, "delivery_count": c}
                                  for f, t, s, c in to_batches(window)]})
        retry = {}
        names = {(g, entry[0], index): (g, topic, index) for (g, topic, index), entry in batch.items()}
        for group_id, topics in by_group.items():
            body = {"group_id": group_id, "topics": [{"topic_id": tid, "partitions": parts}
                                                     for tid, parts in topics.items()]}
            oldest = min(entry[5] for key, entry in batch.items() if key[0] == group_id)
            try:
                answer = await self._request("write", WRITE, 1, body, max(1.0, RETRY_S - (time.monotonic() - oldest)))
            except (ConnectionError, StateError) as exc:
                log.info("share-group state of %s not written yet: %s", group_id, exc)
                retry.update({k: e for k, e in batch.items() if k[0] == group_id})
                continue
            for result in answer.results:
                for p in result.partitions:
                    key = names.get((group_id, result.topic_id, p.partition))
                    entry = batch.get(key) if key is not None else None
                    if entry is None:
                        continue
                    if p.error_code == ErrorCode.none:
                        _done(entry[4])
                    elif p.error_code in RETRIABLE:
                        retry[key] = entry
                    else:
                        _fail(entry[4], StateError(p.error_code, p.error_message or p.error_code.name))
        return retry

    async def _write_here(self, batch: dict) -> dict:
        """This broker is the share coordinator: the records appended here, done once its ISR has them."""
        coordinator = self.broker.share_groups
        records, written = [], []
        for (group_id, topic, index), (topic_id, leader_epoch, state_epoch, window, futures, _) in batch.items():
            try:
                records.append(coordinator.store.write(group_id, topic, str(topic_id), index, leader_epoch,
                                                       state_epoch, window))
            except StateError as exc:
                _fail(futures, exc)
                continue
            written.append((group_id, topic, index))
        if not records:
            return {}
        try:
            offset = coordinator.append_state(records)
            await acknowledged(self.broker, offset)
        except StateError as exc:
            if exc.error_code in RETRIABLE:
                return {key: batch[key] for key in written}
            for key in written:
                _fail(batch[key][4], exc)
            return {}
        for key in written:
            _done(batch[key][4])
        return {}

    # -- reads -------------------------------------------------------------------------------------------

    async def read(self, group_id: str, topic: str, topic_id, index: int, leader_epoch: int,
                   timeout_s: float = RETRY_S) -> dict | None:
        """The share-partition's window as the coordinator holds it (None: it holds none; start offset -1: no
        window, in the state epoch it was deleted in), read in ``leader_epoch`` (which fences older leaders' writes from then on); retried while the coordinator moves, for
        ``timeout_s`` at most."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                if self._local():
                    state = self.broker.share_groups.state
                    before = state.log_end_offset
                    value = self.broker.share_groups.store.read(group_id, topic, str(topic_id), index, leader_epoch)
                    if state.log_end_offset > before:  # the newer leader epoch written: in the ISR first
                        await acknowledged(self.broker, state.log_end_offset - 1)
                    return value
                answer = await self._request("read", READ, 0, {"group_id": group_id, "topics": [
                    {"topic_id": topic_id, "partitions": [{"partition": index, "leader_epoch": leader_epoch}]}]},
                    max(0.1, end - time.monotonic()))
                p = answer.results[0].partitions[0]
                if p.error_code == ErrorCode.none:
                    if p.start_offset < 0:  # no window; a state epoch: its state was deleted (or reset) in it
                        return None if p.state_epoch < 0 else {"start_offset": -1, "state_epoch": p.state_epoch}
                    window = from_batches(p.start_offset, [(b.first_offset, b.last_offset, b.delivery_state,
                                                            b.delivery_count) for b in p.state_batches])
                    window["state_epoch"] = p.state_epoch
                    return window
                raise StateError(p.error_code, p.error_message or p.error_code.name)
            except (ConnectionError, StateError, IndexError) as exc:
                code = getattr(exc, "error_code", ErrorCode.coordinator_not_available)
                if code not in RETRIABLE or time.monotonic() > end:
                    raise StateError(code, str(exc)) from None
            await asyncio.sleep(0.1)

    async def summary(self, group_id: str, partitions: dict) -> dict:
        """ReadShareGroupStateSummary of ``partitions`` ({(topic, topic id): [index, ...]}): {(topic, index): start
        offset} of those the coordinator holds a window of. StateError when there is no coordinator to ask."""
        return {key: start for key, (_, start) in (await self.states(group_id, partitions)).items() if start >= 0}

    async def states(self, group_id: str, partitions: dict) -> dict:
        """``summary`` with the state epochs: {(topic, index): (state epoch, start offset)}, start offset -1 for a
        state deleted in that epoch."""
        coordinator = self.broker.share_groups
        out = {}
        if self._local():
            for (topic, topic_id), indexes in partitions.items():
                for index in indexes:
                    value = coordinator.store.get_partition(group_id, topic, str(topic_id), index)
                    if value is not None:
                        out[(topic, index)] = (int(value.get("state_epoch", 0)), int(value.get("start_offset", -1)))
            return out
        names = {topic_id: topic for topic, topic_id in partitions}
        try:
            answer = await self._request("read", READ_SUMMARY, 1, {"group_id": group_id, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": i, "leader_epoch": -1} for i in indexes]}
                for (_, topic_id), indexes in partitions.items()]})
        except ConnectionError as exc:
            raise StateError(ErrorCode.coordinator_not_available, str(exc)) from None
        for result in answer.results:
            for p in result.partitions:
                if p.error_code == ErrorCode.not_coordinator:
                    raise StateError(p.error_code, "the share coordinator moved")
                if p.error_code == ErrorCode.none and (p.start_offset >= 0 or p.state_epoch >= 0) \
                        and result.topic_id in names:
                    out[(names[result.topic_id], p.partition)] = (p.state_epoch, p.start_offset)
        return out

    # -- offsets reset and deleted (the group coordinator's, AlterShareGroupOffsets / DeleteShareGroupOffsets /
    # DeleteGroups): a new state epoch, so the partitions' leaders holding the old one are fenced and read again

    async def initialize(self, group_id: str, starts: dict) -> None:
        """InitializeShareGroupState: each share-partition of ``starts`` ({(topic, topic id): {index: start
        offset}}) starts afresh there in a state epoch newer than the stored one (read first; asked again when
        another reset took it meanwhile). StateError with the coordinator's error otherwise."""
        for _ in range(5):
            epochs = await self.states(group_id, {key: list(indexes) for key, indexes in starts.items()})
            plan = {(topic, topic_id): [(i, epochs.get((topic, i), (0, 0))[0] + 1, offset)
                                        for i, offset in indexes.items()]
                    for (topic, topic_id), indexes in starts.items()}
            try:
                await self._admin(INITIALIZE, group_id, plan)
                return
            except StateError as exc:
                if exc.error_code != ErrorCode.fenced_state_epoch:
                    raise
        raise StateError(ErrorCode.fenced_state_epoch, "the share-partitions' state epochs kept moving")

    async def delete(self, group_id: str, partitions: dict) -> None:
        """DeleteShareGroupState of ``partitions`` ({(topic, topic id): [index, ...]}): tombstones at the
        coordinator (nothing stored: nothing to do). StateError with the coordinator's error otherwise."""
        await self._admin(DELETE, group_id, {key: [(i, None, None) for i in indexes]
                                             for key, indexes in partitions.items()})

    async def _admin(self, api_key: int, group_id: str, plan: dict) -> None:
        """Initialize (``plan``: {(topic, topic id): [(index, state epoch, start offset)]}) or delete (epoch and
        offset None) share-partitions' state at the coordinator, done once its ISR has it; retried while it moves."""
        end = time.monotonic() + RETRY_S
        while True:
            try:
                if self._local():
                    return await self._admin_here(api_key, group_id, plan)
                body = {"group_id": group_id, "topics": [
                    {"topic_id": topic_id, "partitions": [
                        {"partition": i} if api_key == DELETE else
                        {"partition": i, "state_epoch": epoch, "start_offset": offset} for i, epoch, offset in parts]}
                    for (_, topic_id), parts in plan.items() if parts]}
                answer = await self._request("write", api_key, 0, body, max(0.1, end - time.monotonic()))
                errors = [p for r in answer.results for p in r.partitions if p.error_code != ErrorCode.none]
                if errors:
                    raise StateError(errors[0].error_code, errors[0].error_message or errors[0].error_code.name)
                return
            except (ConnectionError, StateError) as exc:
                code = getattr(exc, "error_code", ErrorCode.coordinator_not_available)
                if code not in RETRIABLE or time.monotonic() > end:
                    raise StateError(code, str(exc)) from None
            await asyncio.sleep(0.1)

    async def _admin_here(self, api_key: int, group_id: str, plan: dict) -> None:
        coordinator = self.broker.share_groups
        records = []
        for (topic, topic_id), parts in plan.items():
            for index, epoch, offset in parts:
                record = (coordinator.store.delete(group_id, topic, index) if api_key == DELETE else
                          coordinator.store.initialize(group_id, topic, str(topic_id), index, epoch, offset))
                if record is not None:
                    records.append(record)
        if records:
            await acknowledged(self.broker, coordinator.append_state(records))

    async def _request(self, kind: str, api_key: int, version: int, body: dict, timeout_s: float = RETRY_S):
        """One request to the share coordinator, answered within ``timeout_s`` (ConnectionError otherwise: a
        coordinator that accepts and does not answer, a paused broker, holds nobody longer); StateError
        COORDINATOR_NOT_AVAILABLE while there is none."""
        membership = self.broker.cluster
        endpoint = membership.coordinator(SHARE_STATE_TOPIC)
        if endpoint is None:
            raise StateError(ErrorCode.coordinator_not_available, "no share coordinator yet")
        end = time.monotonic() + timeout_s
        lock = self._locks.setdefault(kind, asyncio.Lock())
        try:
            await asyncio.wait_for(lock.acquire(), timeout_s)
        except asyncio.TimeoutError:
            raise ConnectionError(f"no answer from the share coordinator within {timeout_s:.1f} s") from None
        try:
            connection = self._connections.get(kind)
            if connection is None or (connection.host, connection.port) != (endpoint.host, endpoint.port):
                if connection is not None:
                    connection.close()
                connection = self._connections[kind] = BrokerConnection(
                    endpoint.host, endpoint.port, f"freshet-share-partition-leader-{membership.node_id}",
                    connect_timeout_s=min(5.0, max(0.1, end - time.monotonic())),
                    sasl=self.broker.config.security.inter_broker_login())
            try:
                return await connection.request(api_key, version, body, max(0.1, end - time.monotonic()))
            except (asyncio.TimeoutError, OSError) as exc:  # connecting timed out or failed
                connection.close()
                raise ConnectionError(f"share coordinator at {endpoint.host}:{endpoint.port}: {exc!r}") from None
        finally:
            lock.release()


def _done(futures) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)


def _fail(futures, exc: Exception) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_exception(exc)

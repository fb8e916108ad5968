"""The transaction coordinator: Kafka's transaction protocol over the log (KIP-98).

One broker is the coordinator of every transactional id. Per id it keeps a producer id and epoch,
the transaction's state and the partitions (and consumer groups) it has touched. Every state change
is a record in the internal compacted topic ``__transaction_state`` (key: the transactional id,
value: JSON), fsync'd before the client hears of it, so after a crash the coordinator finishes what
was PrepareCommit / PrepareAbort and aborts what was Ongoing.

Ending a transaction is a two-phase write this object owns, and it says so: (1) PrepareCommit or
PrepareAbort is made durable, (2) a COMMIT or ABORT control batch is appended to every partition of
the transaction (and to ``__consumer_offsets`` for its offset commits) and made durable, (3) the
state becomes CompleteCommit / CompleteAbort. A reader under read_committed sees a partition up to
its last stable offset: the first offset of the oldest transaction still open there.

Zombies are fenced by epoch: InitProducerId bumps the epoch of a transactional id, and every
transactional request or produce with an older epoch is refused (PRODUCER_FENCED or
INVALID_PRODUCER_EPOCH), as is a produce to a partition the transaction has not added (Jepsen's
hazard: a delayed write of an earlier transaction landing in a later one).

In a cluster ``__transaction_state`` is a replicated topic (created through the controller on the first
FindCoordinator of a transactional id) and the coordinator is the leader of its partition: a state change is
answered once the partition's ISR has it; the other brokers answer NOT_COORDINATOR. A broker that becomes its
leader (``follow``) replays the log it replicated and takes the transactions over as Kafka's coordinator does
after a move: a transaction in PrepareCommit / PrepareAbort gets its markers again, then Complete*; an Ongoing
one stays open for its producer to finish (or the timeout aborts it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from freshet.format.record_batch import decode_records, encode_batch

from freshet.log import InvalidProducerEpochError, StorageError

from .groups.offsets import OFFSETS_TOPIC, append_failure, batches_below, failed_append_code
from .groups.reaper import Reaper
from .replication import ReplicationError

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
# min.insync.replicas as Kafka's transaction.state.log.min.isr (a cluster's topic: at most its replication factor)
TXN_STATE_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024), "min.insync.replicas": "2"}
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
MAX_EPOCH = 32767
APPEND_TIMEOUT_S = 30.0  # a state change or marker not in the ISR within this: COORDINATOR_NOT_AVAILABLE
ABORT_RETRY_S = 0.5  # a timed-out transaction whose abort failed (the state log refused it) is tried again after this

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)


class TransactionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1  # when the open transaction began (its first AddPartitions/AddOffsets)
    updated_ms: int = 0
    # the producer id and epoch an InitProducerId of the producer itself bumped from (Kafka's lastProducerEpoch and
    # previousProducerId): its retry, whose answer was lost (the coordinator moved, the request timed out), gets the
    # bumped epoch again instead of PRODUCER_FENCED. -1: a new producer initialized the id, or the coordinator
    # fenced it: nothing to retry.
    last_producer_epoch: int = -1
    previous_producer_id: int = -1

    def to_json(self) -> bytes:
        return json.dumps({
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch, "timeout_ms": self.timeout_ms,
            "state": self.state, "partitions": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups), "start_ms": self.start_ms, "updated_ms": self.updated_ms,
            "last_producer_epoch": self.last_producer_epoch, "previous_producer_id": self.previous_producer_id,
        }).encode()

    @classmethod
    def from_json(cls, transactional_id: str, value: bytes) -> TransactionMetadata:
        d = json.loads(value)
        return cls(transactional_id, d["producer_id"], d["producer_epoch"], d["timeout_ms"], d["state"],
                   {(t, p) for t, p in d["partitions"]}, set(d["groups"]), d["start_ms"], d["updated_ms"],
                   d.get("last_producer_epoch", -1), d.get("previous_producer_id", -1))


def _now_ms() -> int:
    return int(time.time() * 1000)


def write_marker(broker, partition, producer_id: int, producer_epoch: int, commit: bool,
                 coordinator_epoch: int = 0) -> int:
    """A COMMIT or ABORT marker appended to ``partition`` (to be made durable by the caller); the transactional
    offset commits of the producer take effect, or are dropped, with the marker on ``__consumer_offsets``.
    Returns the marker's offset. A marker from a coordinator of an older epoch than the last one that wrote a
    marker of this producer here is TRANSACTION_COORDINATOR_FENCED, nothing written (as Kafka, which keeps the
    coordinator epoch with the producer's state; here in memory, from this broker's start)."""
    seen = broker.transactions.marker_epochs
    key = (partition.directory, producer_id)
    if coordinator_epoch < seen.get(key, -1):
        raise TransactionError(ErrorCode.transaction_coordinator_fenced,
                               f"a marker of coordinator epoch {coordinator_epoch}, older than {seen[key]}")
    seen[key] = coordinator_epoch
    result = partition.append_marker(producer_id, producer_epoch, commit)
    if partition is broker.offsets.partition:
        broker.offsets.complete_transaction(producer_id, commit)
    broker.group_commit.written(partition)
    return result.last_offset


class TransactionCoordinator:
    """transactional id -> TransactionMetadata, backed by ``__transaction_state``."""

    topic = TXN_STATE_TOPIC

    def __init__(self, broker) -> None:
        self.broker = broker
        self.partition = broker.registry.internal_topic(TXN_STATE_TOPIC, TXN_STATE_CONFIGS).partitions[0]
        self.transactions: dict[str, TransactionMetadata] = {}
        self.by_producer: dict[int, TransactionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # transaction.timeout.ms: checked when the nearest open transaction's timeout comes, not on a tick
        self._timeouts = Reaper(self._check_timeouts, "transaction-timeouts")
        self._expiring: set[str] = set()  # transactional ids whose timeout abort is under way
        self._background: set[asyncio.Task] = set()
        # a cluster: the leader epoch of __transaction_state in which this broker coordinates (None: it does not)
        self.coordinator_epoch: int | None = None
        self._written: dict[str, bytes] = {}  # each transactional id's last state written (what a refusal restores)
        self.marker_epochs: dict[tuple[str, int], int] = {}  # (partition directory, producer) -> coordinator epoch
        self._replay()

    # -- the state log -------------------------------------------------------------------

    def _replay(self, upper: int | None = None) -> None:
        for _header, batch in self.partition.batches() if upper is None else batches_below(self.partition, upper):
            for record in decode_records(batch):
                if record.key is None:
                    continue
                tid = record.key.decode()
                if record.value is None:
                    self.transactions.pop(tid, None)
                    self._written.pop(tid, None)
                else:
                    self._remember(TransactionMetadata.from_json(tid, record.value))
                    self._written[tid] = record.value

    def _remember(self, meta: TransactionMetadata) -> None:
        old = self.transactions.get(meta.transactional_id)
        if old is not None and self.by_producer.get(old.producer_id) is old:
            del self.by_producer[old.producer_id]
        self.transactions[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta

    async def _persist(self, meta: TransactionMetadata) -> None:
        """Write ``meta`` to the state log and wait until it is fsync'd (in a cluster: until the ISR has it;
        Kafka's codes when it cannot: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE). Refused, ``meta`` goes back to
        what was last written (its callers change it first), as Kafka's coordinator drops a pending transition
        whose append failed: a retry then does the change again instead of finding it done."""
        try:
            await self._write(meta)
        except TransactionError:
            before = self._written.get(meta.transactional_id)
            if before is not None:
                meta.__dict__.update(TransactionMetadata.from_json(meta.transactional_id, before).__dict__)
            elif self.transactions.get(meta.transactional_id) is meta:
                self.transactions.pop(meta.transactional_id)
                self.by_producer.pop(meta.producer_id, None)
            raise
        self._written[meta.transactional_id] = meta.to_json()

    async def _write(self, meta: TransactionMetadata) -> None:
        if self.broker.cluster is not None:
            _, leader = self.broker.replicas.check(TXN_STATE_TOPIC, 0)
            if leader is None or self.coordinator_epoch is None:
                raise TransactionError(ErrorCode.not_coordinator, "this broker no longer leads __transaction_state")
            current = self.transactions.get(meta.transactional_id)
            if current is not None and current is not meta:
                # a request of an earlier leadership (``follow`` replayed the log into new objects since): its copy
                # is stale, and Kafka fences it by the coordinator epoch
                raise TransactionError(ErrorCode.not_coordinator,
                                       f"{meta.transactional_id}: a state of an earlier coordinator epoch")
            if len(leader.isr) < leader.min_insync:
                raise TransactionError(ErrorCode.coordinator_not_available,
                                       f"the ISR {list(leader.isr)} of __transaction_state is below "
                                       f"min.insync.replicas={leader.min_insync}")
        meta.updated_ms = _now_ms()
        try:  # a failed disk write is refused like a failed acknowledgement (_persist forgets the change)
            result = self.partition.append(encode_batch([(meta.transactional_id.encode(), meta.to_json(),
                                                          meta.updated_ms)]))
        except StorageError as exc:
            raise TransactionError(failed_append_code(exc), str(exc)) from None
        self._remember(meta)
        self.broker.group_commit.written(self.partition)
        code = await append_failure(self.broker, TXN_STATE_TOPIC, self.partition, result.last_offset,
                                    APPEND_TIMEOUT_S)
        if code is not None:
            raise TransactionError(code, f"{meta.transactional_id}: its state at offset {result.last_offset} of "
                                         f"{TXN_STATE_TOPIC} was not acknowledged")

    def lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Finish what a crash interrupted, then watch for transactions that outlive their timeout. (In a
        cluster the broker that leads __transaction_state does the first part: ``follow``.)"""
        if self.broker.cluster is None:
            for meta in list(self.transactions.values()):
                if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    self._spawn(self._complete(meta, meta.state == PREPARE_COMMIT))
                elif meta.state == ONGOING:
                    self._spawn(self._abort_with_fencing(meta, "the broker restarted"))
        self._timeouts.start()

    def follow(self, leader_epoch: int | None) -> None:
        """A cluster's metadata changed: ``leader_epoch`` is the epoch in which this broker leads
        ``__transaction_state`` (None: another broker does). A broker that becomes its leader replays the
        partition to its log end (what the ISR replicated from the previous coordinator, and this broker's own
        epoch starts after it), sends the markers of the transactions that were being completed again and
        leaves Ongoing ones open for their producers, as Kafka's coordinator does when it loads a partition.
        One that stops leading forgets its work: the next leader does it."""
        if leader_epoch == self.coordinator_epoch:
            return
        for task in list(self._background):
            task.cancel()
        self._locks.clear()
        self._expiring.clear()
        self.coordinator_epoch = leader_epoch
        if leader_epoch is None:
            log.info("no longer the transaction coordinator")
            return
        self.transactions.clear()
        self.by_producer.clear()
        self._written.clear()
        self._replay(self.partition.log_end_offset)
        completing = [m for m in self.transactions.values() if m.state in (PREPARE_COMMIT, PREPARE_ABORT)]
        log.info("transaction coordinator in epoch %d: %d transactional ids taken over, %d being completed, "
                 "%d open", leader_epoch, len(self.transactions), len(completing),
                 sum(1 for m in self.transactions.values() if m.state == ONGOING))
        for meta in completing:
            self._spawn(self._complete_locked(meta, meta.state == PREPARE_COMMIT))
        self._timeouts.due(time.monotonic())  # the open transactions taken over have their timeouts too

    async def _complete_locked(self, meta: TransactionMetadata, commit: bool) -> None:
        async with self.lock(meta.transactional_id):
            if meta.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
                try:
                    await self._complete(meta, commit)
                except TransactionError as exc:
                    log.warning("transaction %s not completed here: %s", meta.transactional_id, exc)

    def _coordinating(self) -> None:
        """NOT_COORDINATOR on a broker of a cluster that does not lead __transaction_state."""
        if self.broker.cluster is not None and self.coordinator_epoch is None:
            raise TransactionError(ErrorCode.not_coordinator,
                                   "this broker is not the transaction coordinator (FindCoordinator names it)")

    async def stop(self) -> None:
        await self._timeouts.stop()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _check_timeouts(self, now: float) -> float | None:
        """The timeouts' reaper (``now``: time.monotonic()): an abort started for every open transaction past
        transaction.timeout.ms; the nearest timeout still ahead (None: no transaction open). A transaction that
        opens tells the reaper its timeout (``_open``), so an idle coordinator is not woken (it was, every 0.5 s)."""
        if self.broker.cluster is not None and self.coordinator_epoch is None:
            return None  # a cluster: only the coordinator's view of the transactions is current (``follow`` wakes it)
        now_ms = _now_ms()
        nearest = None
        for meta in list(self.transactions.values()):
            if meta.transactional_id in self._expiring:
                continue
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                if not self.lock(meta.transactional_id).locked() and now_ms - meta.updated_ms > ABORT_RETRY_S * 1000:
                    self._expiring.add(meta.transactional_id)
                    self._spawn(self._finish(meta))
                when = now + ABORT_RETRY_S
                nearest = when if nearest is None else min(nearest, when)
                continue
            if meta.state != ONGOING:
                continue
            left_ms = meta.start_ms + meta.timeout_ms - now_ms
            if left_ms < 0:
                self._expiring.add(meta.transactional_id)
                self._spawn(self._expire(meta))
                continue
            when = now + (left_ms + 1) / 1000
            if nearest is None or when < nearest:
                nearest = when
        return nearest

    async def _expire(self, meta: TransactionMetadata) -> None:
        """Abort ``meta``'s transaction, past its timeout (unless it ended meanwhile); tried again later if the
        state log refused the abort."""
        tid = meta.transactional_id
        retry = False
        try:
            async with self.lock(tid):
                if meta.state == ONGOING and _now_ms() - meta.start_ms > meta.timeout_ms:
                    try:
                        await self._abort_with_fencing(meta, f"it ran past transaction.timeout.ms={meta.timeout_ms}")
                    except TransactionError as exc:
                        log.warning("transaction %s not aborted here: %s", tid, exc)
                        retry = meta.state == ONGOING
                    except Exception:  # e.g. a marker's fsync failed: tried again while the transaction is open
                        log.exception("aborting transaction %s at its timeout failed", tid)
                        retry = meta.state == ONGOING
        finally:
            self._expiring.discard(tid)
        if retry:
            self._timeouts.due(time.monotonic() + ABORT_RETRY_S)
        elif meta.state in (ONGOING, PREPARE_ABORT):
            self._timeouts.due(time.monotonic())

    async def _finish(self, meta):
        try:
            await self._complete_locked(meta, meta.state == PREPARE_COMMIT)
        except Exception:
            log.exception("completing transaction %s failed; tried again", meta.transactional_id)
        finally:
            self._expiring.discard(meta.transactional_id)

    async def _abort_with_fencing(self, meta: TransactionMetadata, why: str) -> None:
        """Abort an open transaction for the coordinator's own reasons; the producer's epoch is bumped,
        so the producer that opened it is fenced."""
        log.info("aborting transaction %s (producer %d): %s", meta.transactional_id, meta.producer_id, why)
        if meta.producer_epoch + 1 < MAX_EPOCH:
            meta.producer_epoch += 1
        meta.last_producer_epoch = -1  # fenced: no retry of the producer's own bump gets this epoch
        meta.state = PREPARE_ABORT
        await self._persist(meta)
        await self._complete(meta, False)

    # -- the requests ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                               producer_epoch: int) -> tuple[int, int]:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise TransactionError(ErrorCode.invalid_transaction_timeout,
                                   f"transaction timeout {timeout_ms} ms is outside 1..{MAX_TIMEOUT_MS}")
        self._coordinating()
        async with self.lock(transactional_id):
            meta = self.transactions.get(transactional_id)
            if meta is None:
                meta = TransactionMetadata(transactional_id, self.broker.registry.producer_ids.allocate(), 0,
                                           timeout_ms)
                await self._persist(meta)
                return meta.producer_id, meta.producer_epoch
            bumped_by_it = producer_id >= 0 and producer_epoch == meta.last_producer_epoch and producer_id in (
                meta.producer_id, meta.previous_producer_id)
            if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch) \
                    and not bumped_by_it:
                raise TransactionError(ErrorCode.producer_fenced, "a newer producer has this transactional id")
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TransactionError(ErrorCode.concurrent_transactions)
            if meta.state == ONGOING:
                # the previous producer's open transaction is aborted first; the client retries
                self._spawn(self._abort_in_background(meta))
                raise TransactionError(ErrorCode.concurrent_transactions)
            if bumped_by_it:  # the retry of a bump that was written: its answer again, as Kafka
                return meta.producer_id, meta.producer_epoch
            # the producer's own bump (KIP-360) can be retried; a new producer's fences every earlier one
            meta.last_producer_epoch = meta.producer_epoch if producer_id >= 0 else -1
            meta.previous_producer_id = -1
            if meta.producer_epoch + 1 >= MAX_EPOCH:
                meta.previous_producer_id = meta.producer_id if producer_id >= 0 else -1
                meta.producer_id, meta.producer_epoch = self.broker.registry.producer_ids.allocate(), 0
            else:
                meta.producer_epoch += 1
            meta.state, meta.timeout_ms = EMPTY, timeout_ms
            meta.partitions, meta.groups, meta.start_ms = set(), set(), -1
            await self._persist(meta)
            return meta.producer_id, meta.producer_epoch

    async def _abort_in_background(self, meta: TransactionMetadata) -> None:
        async with self.lock(meta.transactional_id):
            if meta.state == ONGOING:
                try:
                    await self._abort_with_fencing(meta, "a new producer initialized the transactional id")
                except TransactionError as exc:
                    log.warning("transaction %s not aborted here: %s", meta.transactional_id, exc)

    def _member(self, transactional_id: str, producer_id: int, producer_epoch: int,
                fenced: ErrorCode) -> TransactionMetadata:
        self._coordinating()
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TransactionError(ErrorCode.invalid_producer_id_mapping,
                                   f"producer {producer_id} does not hold transactional id {transactional_id!r}")
        if producer_epoch != meta.producer_epoch:
            raise TransactionError(fenced, f"epoch {producer_epoch} is not the current {meta.producer_epoch}")
        return meta

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], fenced: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
        async with self.lock(transactional_id):
            meta = self._member(transactional_id, producer_id, producer_epoch, fenced)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TransactionError(ErrorCode.concurrent_transactions)
            if self.broker.cluster is not None:  # the cluster's partitions, wherever they are
                view = self.broker.cluster.view
                unknown = {(t, i) for t, i in partitions if t not in view.topics or t.startswith("__")
                           or not 0 <= i < len(view.topics[t].partitions)}
            else:
                unknown = {tp for tp in partitions if self.broker.registry.partition(*tp) is None
                           or self.broker.registry.topics[tp[0]].internal}
            if unknown:
                return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                        else ErrorCode.operation_not_attempted for tp in partitions}
            await self._open(meta, partitions=set(partitions))
            return {tp: ErrorCode.none for tp in partitions}

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          fenced: ErrorCode) -> None:
        if not group_id:
            raise TransactionError(ErrorCode.invalid_group_id, "group id must not be empty")
        async with self.lock(transactional_id):
            meta = self._member(transactional_id, producer_id, producer_epoch, fenced)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TransactionError(ErrorCode.concurrent_transactions)
            await self._open(meta, partitions={(OFFSETS_TOPIC, 0)}, groups={group_id})

    async def _open(self, meta: TransactionMetadata, partitions: set, groups: set | None = None) -> None:
        if meta.state != ONGOING:
            meta.partitions, meta.groups, meta.start_ms = set(), set(), _now_ms()
            self._timeouts.due(time.monotonic() + meta.timeout_ms / 1000)
        if partitions <= meta.partitions and (groups or set()) <= meta.groups and meta.state == ONGOING:
            return
        meta.partitions |= partitions
        meta.groups |= groups or set()
        meta.state = ONGOING
        await self._persist(meta)

    def check_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                            fenced: ErrorCode) -> None:
        if self.broker.cluster is not None and self.coordinator_epoch is None:
            return  # a cluster: the transaction's coordinator is another broker (it checked AddOffsetsToTxn)
        meta = self._member(transactional_id, producer_id, producer_epoch, fenced)
        if meta.state != ONGOING or group_id not in meta.groups:
            raise TransactionError(ErrorCode.invalid_txn_state,
                                   f"group {group_id!r} was not added to the transaction (AddOffsetsToTxn)")

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                              fenced: ErrorCode) -> None:
        async with self.lock(transactional_id):
            meta = self._member(transactional_id, producer_id, producer_epoch, fenced)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TransactionError(ErrorCode.concurrent_transactions)
            if meta.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return  # a retry of the EndTxn that completed it
            if meta.state != ONGOING:
                raise TransactionError(ErrorCode.invalid_txn_state,
                                       f"cannot {'commit' if commit else 'abort'} a transaction in state {meta.state}")
            meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
            await self._persist(meta)
            await self._complete(meta, commit)

    async def _complete(self, meta: TransactionMetadata, commit: bool) -> None:
        """Phase two: a marker to every partition of the transaction, durable; then Complete*."""
        cluster = self.broker.cluster
        here, elsewhere = [], []
        for topic, index in sorted(meta.partitions):
            if cluster is not None and not cluster.leads(topic, index):
                elsewhere.append((topic, index))  # a cluster: its leader writes the marker (WriteTxnMarkers)
            else:
                here.append((topic, index))
        missed = await asyncio.gather(*(self._mark(meta, commit, topic, index) for topic, index in here))
        elsewhere += [tp for tp in missed if tp is not None]  # leadership moved meanwhile: through the new leader
        if elsewhere:
            from .cluster.markers import write_markers

            missing = await write_markers(cluster, meta.producer_id, meta.producer_epoch, commit, elsewhere,
                                          self.coordinator_epoch or 0)
            if missing:  # as Kafka, the markers are sent again until written: the transaction stays Prepare*
                self._spawn(self._complete_locked(meta, commit))
                raise TransactionError(ErrorCode.concurrent_transactions,
                                       f"no marker yet on {sorted(missing)}: sent again")
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        await self._persist(meta)

    async def _mark(self, meta: TransactionMetadata, commit: bool, topic: str, index: int) -> tuple[str, int] | None:
        """The marker on a partition this broker holds, durable (in a cluster: in its ISR); (topic, index) back
        when this broker turns out not to lead it (the marker goes to its leader then; a second marker of the
        same transaction changes nothing)."""
        partition = self.broker.registry.partition(topic, index)
        if partition is None:
            return None  # deleted since: nothing left to mark
        code, leader = self.broker.replicas.check(topic, index) if self.broker.replicas else (None, None)
        if code is not None:
            return topic, index
        try:
            offset = write_marker(self.broker, partition, meta.producer_id, meta.producer_epoch, commit,
                                  self.coordinator_epoch or 0)
        except TransactionError as exc:
            raise TransactionError(ErrorCode.not_coordinator, str(exc)) from None  # a newer coordinator marked it
        except InvalidProducerEpochError as exc:  # a newer epoch of the producer writes there: nothing to end
            log.info("%s-%d: %s", topic, index, exc)
            return None
        if leader is None:
            await self.broker.group_commit.durable(partition, offset)
            return None
        try:
            await leader.acknowledged(offset, APPEND_TIMEOUT_S)
        except (ReplicationError, StorageError) as exc:
            log.info("the %s marker of producer %d on %s-%d: %s; through its leader", "COMMIT" if commit else "ABORT",
                     meta.producer_id, topic, index, exc)
            return topic, index
        return None

    # -- what others ask -----------------------------------------------------------------

    def check_produce(self, producer_id: int, producer_epoch: int, topic: str, index: int) -> ErrorCode | None:
        """A transactional batch may be written only by the current epoch, inside an open transaction
        that has added the partition."""
        meta = self.by_producer.get(producer_id)
        if self.broker.cluster is not None and (meta is None or self.coordinator_epoch is None):
            return None  # a cluster: the producer's coordinator is another broker (it checked AddPartitionsToTxn)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch < meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if producer_epoch != meta.producer_epoch or meta.state != ONGOING or (topic, index) not in meta.partitions:
            return ErrorCode.invalid_txn_state
        return None

    def describe(self, meta: TransactionMetadata) -> dict:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        return {"error_code": ErrorCode.none, "transactional_id": meta.transactional_id,
                "transaction_state": meta.state, "transaction_timeout": meta.timeout_ms,
                "transaction_start_time": meta.start_ms, "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

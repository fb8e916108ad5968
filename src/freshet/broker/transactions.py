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
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from freshet.format.record_batch import decode_records, encode_batch

from .groups.offsets import OFFSETS_TOPIC

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
TXN_STATE_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
MAX_EPOCH = 32767

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

    def to_json(self) -> bytes:
        return json.dumps({
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch, "timeout_ms": self.timeout_ms,
            "state": self.state, "partitions": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups), "start_ms": self.start_ms, "updated_ms": self.updated_ms,
        }).encode()

    @classmethod
    def from_json(cls, transactional_id: str, value: bytes) -> TransactionMetadata:
        d = json.loads(value)
        return cls(transactional_id, d["producer_id"], d["producer_epoch"], d["timeout_ms"], d["state"],
                   {(t, p) for t, p in d["partitions"]}, set(d["groups"]), d["start_ms"], d["updated_ms"])


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """transactional id -> TransactionMetadata, backed by ``__transaction_state``."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.partition = broker.registry.internal_topic(TXN_STATE_TOPIC, TXN_STATE_CONFIGS).partitions[0]
        self.transactions: dict[str, TransactionMetadata] = {}
        self.by_producer: dict[int, TransactionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._replay()

    # -- the state log -------------------------------------------------------------------

    def _replay(self) -> None:
        for _header, batch in self.partition.batches():
            for record in decode_records(batch):
                if record.key is None:
                    continue
                tid = record.key.decode()
                if record.value is None:
                    self.transactions.pop(tid, None)
                else:
                    self._remember(TransactionMetadata.from_json(tid, record.value))

    def _remember(self, meta: TransactionMetadata) -> None:
        old = self.transactions.get(meta.transactional_id)
        if old is not None and self.by_producer.get(old.producer_id) is old:
            del self.by_producer[old.producer_id]
        self.transactions[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta

    async def _persist(self, meta: TransactionMetadata) -> None:
        """Write ``meta`` to the state log and wait until it is fsync'd."""
        meta.updated_ms = _now_ms()
        result = self.partition.append(encode_batch([(meta.transactional_id.encode(), meta.to_json(),
                                                      meta.updated_ms)]))
        self._remember(meta)
        commit = self.broker.group_commit
        commit.written(self.partition)
        await commit.durable(self.partition, result.last_offset)

    def lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Finish what a crash interrupted, then watch for transactions that outlive their timeout."""
        loop = asyncio.get_running_loop()
        for meta in list(self.transactions.values()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._spawn(self._complete(meta, meta.state == PREPARE_COMMIT))
            elif meta.state == ONGOING:
                self._spawn(self._abort_with_fencing(meta, "the broker restarted"))
        self._task = loop.create_task(self._expire(), name="transaction-timeouts")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = _now_ms()
            for meta in list(self.transactions.values()):
                if meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                    async with self.lock(meta.transactional_id):
                        if meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                            await self._abort_with_fencing(meta, f"it ran past transaction.timeout.ms={meta.timeout_ms}")

    async def _abort_with_fencing(self, meta: TransactionMetadata, why: str) -> None:
        """Abort an open transaction for the coordinator's own reasons; the producer's epoch is bumped,
        so the producer that opened it is fenced."""
        log.info("aborting transaction %s (producer %d): %s", meta.transactional_id, meta.producer_id, why)
        if meta.producer_epoch + 1 < MAX_EPOCH:
            meta.producer_epoch += 1
        meta.state = PREPARE_ABORT
        await self._persist(meta)
        await self._complete(meta, False)

    # -- the requests ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                               producer_epoch: int) -> tuple[int, int]:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise TransactionError(ErrorCode.invalid_transaction_timeout,
                                   f"transaction timeout {timeout_ms} ms is outside 1..{MAX_TIMEOUT_MS}")
        async with self.lock(transactional_id):
            meta = self.transactions.get(transactional_id)
            if meta is None:
                meta = TransactionMetadata(transactional_id, self.broker.registry.producer_ids.allocate(), 0,
                                           timeout_ms)
                await self._persist(meta)
                return meta.producer_id, meta.producer_epoch
            if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                raise TransactionError(ErrorCode.producer_fenced, "a newer producer has this transactional id")
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TransactionError(ErrorCode.concurrent_transactions)
            if meta.state == ONGOING:
                # the previous producer's open transaction is aborted first; the client retries
                self._spawn(self._abort_in_background(meta))
                raise TransactionError(ErrorCode.concurrent_transactions)
            if meta.producer_epoch + 1 >= MAX_EPOCH:
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
                await self._abort_with_fencing(meta, "a new producer initialized the transactional id")

    def _member(self, transactional_id: str, producer_id: int, producer_epoch: int,
                fenced: ErrorCode) -> TransactionMetadata:
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
        if partitions <= meta.partitions and (groups or set()) <= meta.groups and meta.state == ONGOING:
            return
        meta.partitions |= partitions
        meta.groups |= groups or set()
        meta.state = ONGOING
        await self._persist(meta)

    def check_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                            fenced: ErrorCode) -> None:
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
        registry = self.broker.registry
        commit_log = self.broker.group_commit
        cluster = self.broker.cluster
        waits, elsewhere = [], []
        for topic, index in sorted(meta.partitions):
            if cluster is not None and not cluster.leads(topic, index):
                elsewhere.append((topic, index))  # a cluster: its leader writes the marker (WriteTxnMarkers)
                continue
            partition = registry.partition(topic, index)
            if partition is None:
                continue  # deleted since: nothing left to mark
            result = partition.append_marker(meta.producer_id, meta.producer_epoch, commit)
            commit_log.written(partition)
            waits.append(commit_log.durable(partition, result.last_offset))
        if meta.groups:
            self.broker.offsets.complete_transaction(meta.producer_id, commit)
        if elsewhere:
            from .cluster.markers import write_markers

            waits.append(write_markers(cluster, meta.producer_id, meta.producer_epoch, commit, elsewhere))
        await asyncio.gather(*waits)
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        await self._persist(meta)

    # -- what others ask -----------------------------------------------------------------

    def check_produce(self, producer_id: int, producer_epoch: int, topic: str, index: int) -> ErrorCode | None:
        """A transactional batch may be written only by the current epoch, inside an open transaction
        that has added the partition."""
        meta = self.by_producer.get(producer_id)
        if meta is None and self.broker.cluster is not None and not self.broker.cluster.coordinates():
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

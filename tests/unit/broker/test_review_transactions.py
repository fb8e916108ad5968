"""Review findings on the transaction coordinator of a cluster (broker/transactions.py, bb3c524): a real broker
in-process whose ``cluster`` and ``replicas`` are small stand-ins, so the ISR of ``__transaction_state`` and the
leaders of the data partitions are set by the test. Kafka's coordinator changes a transaction's state in memory
only once its record is in the log (TransactionMetadata.prepareTransitionTo / completeTransitionTo: a failed
append leaves the old state), and retries a transaction's markers until every partition has one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.cluster import markers
from freshet.broker.config import BrokerConfig
from freshet.broker.replication import ReplicationError
from freshet.broker.server import Broker
from freshet.broker.transactions import COMPLETE_COMMIT, ONGOING, PREPARE_COMMIT, TXN_STATE_TOPIC, TransactionError

FENCED = ErrorCode.invalid_producer_epoch
NODE = 0


class Leader:
    """What the coordinator uses of a LeaderState: the ISR, min.insync.replicas and acks=all."""

    def __init__(self, broker, partition, isr, min_insync) -> None:
        self.broker, self.partition, self.isr, self.min_insync = broker, partition, list(isr), min_insync

    async def acknowledged(self, last_offset: int, timeout_s: float) -> None:
        await self.broker.group_commit.durable(self.partition, last_offset)
        if len(self.isr) < self.min_insync:
            raise ReplicationError(ErrorCode.not_enough_replicas_after_append, "ISR below min.insync.replicas")


class Replicas:
    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], Leader] = {}

    def check(self, topic: str, index: int, current_leader_epoch: int = -1):
        leader = self.leaders.get((topic, index))
        return (None, leader) if leader is not None else (ErrorCode.not_leader_or_follower, None)


class Cluster:
    """A view where this broker (0) leads t-0 and broker 2, fenced, leads t-1."""

    node_id = NODE

    def __init__(self, broker) -> None:
        self.broker = broker
        part = lambda leader: SimpleNamespace(leader=leader)  # noqa: E731
        self.view = SimpleNamespace(
            topics={"t": SimpleNamespace(partitions=[part(NODE), part(2)])},
            brokers={NODE: SimpleNamespace(host="127.0.0.1", port=1, fenced=False),
                     2: SimpleNamespace(host="127.0.0.1", port=1, fenced=True)})

    def leads(self, topic: str, index: int) -> bool:
        return self.view.topics[topic].partitions[index].leader == NODE


def run(tmp_path, scenario) -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1", port=0, node_id=NODE))
        await broker.start()
        try:
            broker.registry.create("t", 2)
            replicas = Replicas()
            state = Leader(broker, broker.transactions.partition, (NODE, 1), 2)
            replicas.leaders[(TXN_STATE_TOPIC, 0)] = state
            replicas.leaders[("t", 0)] = Leader(broker, broker.registry.partition("t", 0), (NODE, 1), 1)
            broker.cluster, broker.replicas = Cluster(broker), replicas
            broker.transactions.follow(0)  # this broker leads __transaction_state in epoch 0
            await scenario(broker, state)
        finally:
            broker.cluster = broker.replicas = None
            await broker.stop()

    asyncio.run(main())


async def begun(txn, partitions) -> tuple[int, int]:
    """Transactional id ``tx`` initialized and a transaction open on ``partitions``: (producer id, epoch)."""
    pid, epoch = await txn.init_producer_id("tx", 60_000, -1, -1)
    await txn.add_partitions("tx", pid, epoch, partitions, FENCED)
    return pid, epoch


def test_an_end_txn_refused_below_min_isr_can_be_retried(tmp_path):
    async def scenario(broker, state):
        txn = broker.transactions
        pid, epoch = await begun(txn, [("t", 0)])
        state.isr = [NODE]  # a follower of __transaction_state fenced: ISR below min.insync.replicas=2
        with pytest.raises(TransactionError) as refused:
            await txn.end_transaction("tx", pid, epoch, True, FENCED)
        assert refused.value.error_code == ErrorCode.coordinator_not_available
        state.isr = [NODE, 1]  # it is back: the client's retry of EndTxn commits (it got CONCURRENT_TRANSACTIONS
        # for ever: the transaction stayed PrepareCommit in memory, with no marker sent and no timeout for it)
        await asyncio.wait_for(txn.end_transaction("tx", pid, epoch, True, FENCED), 60)
        assert txn.transactions["tx"].state == COMPLETE_COMMIT

    run(tmp_path, scenario)


def test_a_partition_added_to_a_transaction_is_in_the_state_log_when_answered(tmp_path):
    async def scenario(broker, state):
        txn = broker.transactions
        pid, epoch = await begun(txn, [("t", 0)])
        state.isr = [NODE]
        with pytest.raises(TransactionError):
            await txn.add_partitions("tx", pid, epoch, [("t", 1)], FENCED)
        state.isr = [NODE, 1]
        answer = await txn.add_partitions("tx", pid, epoch, [("t", 1)], FENCED)  # the client's retry
        assert answer == {("t", 1): ErrorCode.none}
        # the next coordinator replays the log: it must know t-1, or its EndTxn leaves t-1 without a marker
        # (a half-committed transaction, and t-1's last stable offset stuck)
        txn.follow(None)
        txn.follow(1)
        assert ("t", 1) in txn.transactions["tx"].partitions

    run(tmp_path, scenario)


def test_a_transaction_is_not_complete_while_a_partition_has_no_marker(tmp_path, monkeypatch):
    monkeypatch.setattr(markers, "GIVE_UP_S", 0.3)  # 120 s in the broker: a leader away longer than that

    async def scenario(broker, state):
        txn = broker.transactions
        pid, epoch = await begun(txn, [("t", 0), ("t", 1)])
        ending = asyncio.ensure_future(txn.end_transaction("tx", pid, epoch, True, FENCED))
        try:
            # t-1's leader (broker 2) is fenced the whole time: no COMMIT marker can be on t-1
            await asyncio.wait({ending}, timeout=10)
            assert txn.transactions["tx"].state == PREPARE_COMMIT  # Kafka keeps sending the marker
        finally:
            ending.cancel()
            await asyncio.gather(ending, return_exceptions=True)

    run(tmp_path, scenario)


def test_a_marker_from_a_deposed_coordinator_is_fenced(tmp_path):
    """Kafka keeps each producer's coordinator epoch with its state on the partition and refuses a marker of an
    older one (TRANSACTION_COORDINATOR_FENCED): a coordinator that lost __transaction_state while it was still
    retrying a transaction's markers (write_markers goes on for 120 s; follow(None) does not stop an EndTxn in
    progress) must not end the transaction the producer began since with the same epoch."""
    from freshet.broker.replication.client import BrokerConnection
    from freshet.format.record_batch import TRANSACTIONAL_FLAG, encode_batch

    def txn_batch(seq: int, value: bytes) -> bytes:
        return encode_batch([(b"k", value, 1)], producer_id=7, producer_epoch=0, base_sequence=seq,
                            attributes=TRANSACTIONAL_FLAG)

    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1", port=0, node_id=NODE))
        await broker.start()
        connection = BrokerConnection("127.0.0.1", broker.port, "review")
        try:
            broker.registry.create("t", 1)
            partition = broker.registry.partition("t", 0)

            async def marker(coordinator_epoch: int) -> ErrorCode:
                answer = await connection.request(27, 1, {"markers": [{
                    "producer_id": 7, "producer_epoch": 0, "transaction_result": True,
                    "coordinator_epoch": coordinator_epoch, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
                return answer.markers[0].topics[0].partitions[0].error_code

            partition.append(txn_batch(0, b"first"))  # 0: the first transaction
            assert await marker(1) == ErrorCode.none  # 1: committed by the coordinator of epoch 1
            partition.append(txn_batch(1, b"second"))  # 2: the producer's next transaction, open
            end = partition.log_end_offset
            # the deposed coordinator (epoch 0) retrying the first transaction's COMMIT
            assert await marker(0) == ErrorCode.transaction_coordinator_fenced
            assert partition.log_end_offset == end  # nothing written
        finally:
            connection.close()
            await broker.stop()

    asyncio.run(main())


async def until(condition, what: str, deadline_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        if loop.time() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        await asyncio.sleep(0.02)


def test_an_end_txn_of_an_earlier_leadership_does_not_overwrite_the_next_transaction(tmp_path):
    """The coordinator loses __transaction_state and gets it back (A -> B -> A) while an EndTxn is still sending
    markers (write_markers retries for 120 s, longer than the client's request.timeout.ms). The new leadership
    completes the transaction from the log, the client's retried EndTxn is answered, the producer begins its
    next transaction; then the old EndTxn's markers get through and it persists its own, older, copy of the
    transaction: Kafka fences such a write by the coordinator epoch (NOT_COORDINATOR), here it replaced the open
    transaction (its partitions then get no marker)."""

    async def scenario(broker, state):
        txn, cluster = broker.transactions, broker.cluster
        pid, epoch = await begun(txn, [("t", 0), ("t", 1)])
        old = asyncio.ensure_future(txn.end_transaction("tx", pid, epoch, True, FENCED))
        try:
            await until(lambda: broker.registry.partition("t", 0).log_end_offset == 1,
                        "the old EndTxn's marker on t-0 (t-1's leader is away)")
            txn.follow(None)  # another broker leads __transaction_state ...
            txn.follow(1)  # ... and this one again, in epoch 1: the PrepareCommit replayed, its markers resent
            # t-1 is led here now (the old EndTxn's write_markers still dials this broker at port 1)
            cluster.view.topics["t"].partitions[1].leader = NODE
            broker.replicas.leaders[("t", 1)] = Leader(broker, broker.registry.partition("t", 1), (NODE, 1), 1)
            await until(lambda: txn.transactions["tx"].state == COMPLETE_COMMIT, "completed by the new leadership")
            await txn.end_transaction("tx", pid, epoch, True, FENCED)  # the client's retry: answered NONE
            await txn.add_partitions("tx", pid, epoch, [("t", 0)], FENCED)  # the producer's next transaction
            cluster.view.brokers[NODE].port = broker.port  # the old EndTxn's WriteTxnMarkers gets through
            await asyncio.wait({old}, timeout=60)
            assert (txn.transactions["tx"].state, txn.transactions["tx"].partitions) == (ONGOING, {("t", 0)})
            txn.follow(None)
            txn.follow(2)  # the next coordinator reads the log
            assert (txn.transactions["tx"].state, txn.transactions["tx"].partitions) == (ONGOING, {("t", 0)})
        finally:
            old.cancel()
            await asyncio.gather(old, return_exceptions=True)

    run(tmp_path, scenario)

"""In-process replication: two or three ``Broker``s in one event loop on free 127.0.0.1 ports, each with a
``ReplicaManager`` fed partition states by hand (no controller), and an ``alter_isr`` that records every call
and applies it as the controller would (epochs checked, partition epoch + 1, the new metadata given to every
broker)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.config import BrokerConfig
from freshet.broker.replication import BrokerEndpoint, PartitionState, ReplicaManager
from freshet.broker.replication.client import BrokerConnection
from freshet.broker.server import Broker
from freshet.format.record_batch import encode_batch

DEADLINE_S = 60


async def wait_until(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        await asyncio.sleep(0.02)


class LocalReplicas:
    def __init__(self, root, count: int, lag_ms: int = 10_000) -> None:
        self.root = root
        self.count = count
        self.lag_ms = lag_ms
        self.brokers: dict[int, Broker] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.alter_calls: list[tuple[int, str, int, int, int, tuple[int, ...]]] = []
        self.events: list[str] = []  # what happened, in order (ISR changes, answers the tests note)
        self.refuse_alter = False

    async def start(self) -> None:
        for node in range(self.count):
            await self.start_broker(node)

    async def start_broker(self, node: int) -> Broker:
        broker = Broker(BrokerConfig(data_dir=str(self.root / f"broker-{node}"), host="127.0.0.1", port=0,
                                     node_id=node))
        await broker.start()
        broker.replicas = ReplicaManager(broker, node, self._alter_isr_of(node), self.lag_ms)
        self.brokers[node] = broker
        return broker

    async def stop_broker(self, node: int) -> None:
        broker = self.brokers.pop(node)
        await broker.replicas.close()
        await broker.stop()

    async def stop(self) -> None:
        for node in list(self.brokers):
            await self.stop_broker(node)

    @property
    def endpoints(self) -> dict[int, BrokerEndpoint]:
        return {n: BrokerEndpoint(n, "127.0.0.1", b.port, None, False) for n, b in self.brokers.items()}

    def create_topic(self, name: str, partitions: int = 1, replicas: tuple[int, ...] = (0, 1, 2),
                     configs: dict | None = None) -> None:
        topic_id = uuid.uuid4()
        for broker in self.brokers.values():
            broker.registry.create(name, partitions, configs=dict(configs or {}))
        for index in range(partitions):
            self.states[(name, index)] = PartitionState(name, topic_id, index, replicas, replicas, replicas[0], 0, 0)

    async def replicated_topic(self, name: str, replicas: tuple[int, ...], configs: dict | None = None,
                               nodes=None, **state) -> None:
        """A one-partition topic on every broker, its state (``state`` changed from leader = the first replica,
        epochs 0) given to ``nodes`` (default: every broker)."""
        self.create_topic(name, 1, replicas, configs)
        if state:
            self.set_state(name, **state)
        await self.apply(nodes)

    def set_state(self, name: str, index: int = 0, **changes) -> PartitionState:
        state = self.states[(name, index)] = replace(self.states[(name, index)], **changes)
        return state

    async def apply(self, nodes=None) -> None:
        for node in (self.brokers if nodes is None else nodes):
            await self.brokers[node].replicas.apply(list(self.states.values()), self.endpoints)

    def _alter_isr_of(self, node: int):
        async def alter_isr(topic, index, leader_epoch, partition_epoch, new_isr):
            self.alter_calls.append((node, topic, index, leader_epoch, partition_epoch, tuple(new_isr)))
            state = self.states[(topic, index)]
            if self.refuse_alter:
                return {"error": "INVALID_UPDATE_VERSION", "error_code": 95, "message": "refused by the test",
                        "value": None}
            if state.leader != node:
                return {"error": "NOT_LEADER_OR_FOLLOWER", "error_code": 6, "message": "", "value": None}
            if leader_epoch != state.leader_epoch:
                return {"error": "FENCED_LEADER_EPOCH", "error_code": 74, "message": "", "value": None}
            if partition_epoch != state.partition_epoch:
                return {"error": "INVALID_UPDATE_VERSION", "error_code": 95, "message": "", "value": None}
            isr = tuple(r for r in state.replicas if r in new_isr)
            kind = "shrink" if len(isr) < len(state.isr) else "expand"
            self.events.append(f"{kind} {topic}-{index} to {list(isr)}")
            self.states[(topic, index)] = replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
            asyncio.get_running_loop().create_task(self.apply())  # the metadata reaches every broker
            return {"error": "NONE", "error_code": 0, "message": "",
                    "value": {"isr": list(isr), "partition_epoch": state.partition_epoch + 1}}

        return alter_isr

    def partition(self, node: int, topic: str, index: int = 0):
        return self.brokers[node].registry.partition(topic, index)

    async def connect(self, node: int) -> BrokerConnection:
        broker = self.brokers[node]
        connection = BrokerConnection("127.0.0.1", broker.port, "test-client")
        await connection.connect()
        return connection


@pytest.fixture
def run(tmp_path):
    """``run(scenario, count=3, lag_ms=...)``: the scenario coroutine, given a started LocalReplicas (or ``kind``,
    a subclass)."""

    def runner(scenario, count: int = 3, lag_ms: int = 10_000, kind: type = LocalReplicas):
        async def main():
            cluster = kind(tmp_path, count, lag_ms)
            await cluster.start()
            try:
                await asyncio.wait_for(scenario(cluster), 240)
            finally:
                await cluster.stop()

        asyncio.run(main())

    return runner


def batch(*values: bytes, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, v, now) for v in values], producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence)


async def produce(connection: BrokerConnection, topic: str, records: bytes, acks: int = -1, index: int = 0,
                  version: int = 9, timeout_ms: int = 30_000):
    """One Produce request; the partition's response (and the whole response, for the hints)."""
    response = await connection.request(0, version, {
        "transactional_id": None, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": records}]}],
    }, timeout_s=timeout_ms / 1000 + 60)
    return response.responses[0].partition_responses[0], response


def log_bytes(partition) -> bytes:
    """Every batch of a partition's log up to its end, as stored."""
    return partition.read(partition.log_start_offset, 1 << 30, upper=partition.log_end_offset)


def ok(code) -> bool:
    return code == ErrorCode.none

"""Transaction markers to partitions other brokers lead (WriteTxnMarkers, API 27, between brokers): the
transaction coordinator of a cluster ends a transaction on every partition it holds, through each partition's
current leader, retried while leadership moves."""

from __future__ import annotations

import asyncio
import logging
import time

from ..replication.client import BrokerConnection

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS, VERSION = 27, 1
FENCED, OLD_EPOCH = 52, 47  # TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH
GIVE_UP_S = 120.0


async def write_markers(membership, producer_id: int, producer_epoch: int, commit: bool,
                        partitions: list[tuple[str, int]], coordinator_epoch: int = 0) -> set[tuple[str, int]]:
    """COMMIT or ABORT markers on ``partitions``, each written by its leader; returns once every one is written
    (or its topic is gone), or after ``GIVE_UP_S`` with the rest logged: the partitions still without one."""
    pending = set(partitions)
    connections: dict[int, BrokerConnection] = {}
    end = time.monotonic() + GIVE_UP_S
    try:
        while pending and time.monotonic() < end:
            view = membership.view
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(pending):
                info = view.topics.get(topic)
                if info is None or index >= len(info.partitions):
                    pending.discard((topic, index))  # deleted since: nothing left to mark
                    continue
                by_leader.setdefault(info.partitions[index].leader, []).append((topic, index))
            for leader, where in by_leader.items():
                endpoint = view.brokers.get(leader)
                if endpoint is None or endpoint.fenced:
                    continue  # offline: wait for a leader
                topics: dict[str, list[int]] = {}
                for topic, index in where:
                    topics.setdefault(topic, []).append(index)
                connection = connections.get(leader)
                if connection is None or (connection.host, connection.port) != (endpoint.host, endpoint.port):
                    connection = connections[leader] = BrokerConnection(
                        endpoint.host, endpoint.port, f"freshet-txn-coordinator-{membership.node_id}",
                        sasl=membership.broker.config.security.inter_broker_login())
                try:
                    answer = await connection.request(WRITE_TXN_MARKERS, VERSION, {"markers": [{
                        "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                        "topics": [{"name": t, "partition_indexes": i} for t, i in topics.items()],
                        "coordinator_epoch": coordinator_epoch}]})
                except ConnectionError as exc:
                    log.info("transaction markers to broker %d: %s", leader, exc)
                    connections.pop(leader, None)
                    continue
                for result in answer.markers:
                    for t in result.topics:
                        for p in t.partitions:
                            if p.error_code == 0:
                                pending.discard((t.name, p.partition_index))
                            elif p.error_code in (FENCED, OLD_EPOCH):  # a newer coordinator or epoch is there
                                log.info("producer %d: marker on %s-%d refused (%d): a newer coordinator epoch or "
                                         "producer epoch marked it", producer_id, t.name, p.partition_index,
                                         p.error_code)
                                pending.discard((t.name, p.partition_index))
            if pending:
                await asyncio.sleep(0.1)  # a leader moving: the metadata will say where
    finally:
        for connection in connections.values():
            connection.close()
    if pending:
        log.error("producer %d: no %s marker written on %s within %.0f s", producer_id,
                  "COMMIT" if commit else "ABORT", sorted(pending), GIVE_UP_S)
    return pending

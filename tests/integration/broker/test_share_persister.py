"""A share-partition leader's client of the share coordinator (``cluster.share_persister``) over the wire: its
WriteShareGroupState and ReadShareGroupState against a live broker acting as share coordinator (a one-node broker
is its own), as a cluster's partition leader sends them when the coordinator is another broker."""

import asyncio
import types

from kio.schema.errors import ErrorCode

from freshet.broker.cluster.share_persister import SharePersister
from freshet.broker.groups.share_state import StateError, from_batches
from freshet.broker.replication.metadata import BrokerEndpoint
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

from .test_share_bad_input import topic_id
from .test_share_state_apis import read


def leader_of(port: int) -> types.SimpleNamespace:
    """What the persister asks of its broker: a cluster whose share coordinator is the broker at ``port``."""
    endpoint = BrokerEndpoint(1, "127.0.0.1", port, None, False)
    return types.SimpleNamespace(
        cluster=types.SimpleNamespace(coordinator=lambda topic: endpoint, node_id=2),
        share_groups=types.SimpleNamespace(coordinator_epoch=None),
        config=types.SimpleNamespace(security=types.SimpleNamespace(inter_broker_login=lambda: None)))


def test_windows_written_coalesced_and_read_back_over_the_wire(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic_name)
    first = from_batches(0, [(0, 4, 1, 1)])  # five records acquired
    last = from_batches(2, [(2, 2, 2, 1), (3, 4, 1, 1), (5, 5, 0, 2)])  # then 0-1 and 2 accepted, 5 released

    async def run():
        persister = SharePersister(leader_of(broker.port))
        try:
            assert await persister.read("g", topic_name, tid, 0, 3) is None  # nothing stored yet
            writes = [persister.write("g", topic_name, tid, 0, 3, 0, first),
                      persister.write("g", topic_name, tid, 0, 3, 0, last)]
            await asyncio.gather(*writes)  # both done by the one window that holds them
            window = await persister.read("g", topic_name, tid, 0, 3)
            refused = persister.write("g", topic_name, tid, 0, 2, 0, first)  # a deposed leader's epoch
            fenced = None
            try:
                await refused
            except StateError as exc:
                fenced = exc.error_code
            return window, fenced
        finally:
            persister.close()

    window, fenced = asyncio.run(run())
    assert (window["start_offset"], window["states"], window["counts"]) == (2, last["states"], last["counts"])
    assert fenced == ErrorCode.fenced_leader_epoch
    with RawConnection(broker.bootstrap) as conn:
        assert read(conn, "g", tid, leader_epoch=3) == (ErrorCode.none, 2, [(2, 2, 2, 1), (3, 4, 1, 1), (5, 5, 0, 2)])

"""A broker that becomes the leader of ``__consumer_offsets`` takes the groups over (commits, classic groups, KIP-848
members: cluster/membership.py ``_apply``) only after the replica manager has made it the leader, which awaits. In
that moment its view already names it the coordinator (FindCoordinator answers it), so it must not answer group
requests from what it held before: a KIP-848 member's heartbeat there was answered UNKNOWN_MEMBER_ID and the member
rejoined from epoch 0 and was assigned again (tests/replication/test_consumer_group_takeover.py failed 3 runs of 40
at load 8-14 so). In process: a broker's own ClusterMembership applies a snapshot that makes it the leader while
its replica manager's apply is held."""

import asyncio
import uuid
from datetime import timedelta
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from freshet.broker.cluster.membership import ClusterMembership
from freshet.broker.config import BrokerConfig
from freshet.broker.groups.consumer import ConsumerGroupCoordinator
from freshet.broker.groups.consumer_records import ConsumerGroupStore
from freshet.broker.groups.offsets import OFFSETS_TOPIC
from freshet.broker.handlers.consumer_groups import consumer_group_heartbeat
from freshet.broker.server import Broker

NODE, OTHER = 1, 2


def _snapshot(offset: int, offsets_leader: int, orders_id: uuid.UUID) -> dict:
    def topic(name, topic_id, leader, epoch):
        return {"name": name, "topic_id": str(topic_id), "partitions": [
            {"partition": 0, "replicas": [NODE, OTHER], "isr": [NODE, OTHER], "leader": leader, "leader_epoch": epoch,
             "partition_epoch": epoch}]}
    return {"offset": offset, "version": offset, "controller_id": 3,
            "brokers": [{"broker_id": n, "host": "127.0.0.1", "port": 1, "fenced": False} for n in (NODE, OTHER)],
            "topics": [topic(OFFSETS_TOPIC, uuid.UUID(int=1), offsets_leader, offset),
                       topic("orders", orders_id, offsets_leader, offset)]}


class _HeldReplicas:
    """The replica manager's apply, held until ``release`` (a loaded machine's: a fetcher closed, the lock)."""

    def __init__(self) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    async def apply(self, states, brokers) -> None:
        self.entered.set()
        await self.release.wait()


def _heartbeat(broker, epoch: int, orders_id: uuid.UUID) -> dict:
    ctx = SimpleNamespace(broker=broker, version=1, allowed=lambda *_: True, peer_host="/127.0.0.1",
                          header=SimpleNamespace(client_id="takeover"))
    answer = consumer_group_heartbeat(ctx, SimpleNamespace(
        group_id="g", member_id="m-1", member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=["orders"] if epoch == 0 else None,
        subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=[] if epoch == 0 else [SimpleNamespace(topic_id=orders_id, partitions=[0])]))
    assert isinstance(answer, dict), "a heartbeat that changes nothing writes nothing (no wait for the ISR)"
    return answer


def test_a_heartbeat_while_the_new_coordinator_takes_the_groups_over_is_not_answered_unknown_member(tmp_path):
    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1", port=0, node_id=NODE,
                                     controllers=[("127.0.0.1", 1)]))
        try:
            orders_id = broker.registry.create("orders", 1).topic_id
            # the previous coordinator (broker 2): member m-1 joined at epoch 1 with orders-0; its records are in
            # this broker's replica of __consumer_offsets, as replication left them
            previous = ConsumerGroupCoordinator(broker.registry)
            previous.on_change = ConsumerGroupStore(previous, broker.offsets).changed
            joined = previous.heartbeat("g", "m-1", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=30_000,
                                        subscribed_names=("orders",), subscribed_regex=None, server_assignor=None,
                                        owned={}, client_id="c", client_host="127.0.0.1", version=1)
            assert joined["member_epoch"] == 1 and joined["assignment"] == {"orders": frozenset({0})}

            membership = broker.cluster = ClusterMembership(broker, [("127.0.0.1", 1)], NODE)
            membership._changed = asyncio.Condition()  # as start() sets it up, without the controllers
            membership._attach_coordinators()
            broker.replicas = replicas = _HeldReplicas()
            replicas.release.set()
            await membership._apply(_snapshot(1, OTHER, orders_id))  # a follower of broker 2's __consumer_offsets
            assert not membership.coordinates()
            assert _heartbeat(broker, 1, orders_id)["error_code"] == ErrorCode.not_coordinator

            replicas.release.clear()  # broker 2 is gone: this broker is the leader, its replica manager slow
            applying = asyncio.ensure_future(membership._apply(_snapshot(2, NODE, orders_id)))
            await asyncio.wait_for(replicas.entered.wait(), 30)
            assert membership.coordinator().node_id == NODE  # FindCoordinator names this broker already
            # the member's heartbeat in this moment: the group is not taken over yet; answered UNKNOWN_MEMBER_ID,
            # the member rejoined from epoch 0 and was assigned its partition again
            during = _heartbeat(broker, 1, orders_id)
            assert during["error_code"] == ErrorCode.not_coordinator, during
            assert not membership.coordinates() and "g" not in broker.consumer_groups.groups
            replicas.release.set()
            await asyncio.wait_for(applying, 30)

            assert membership.coordinates()
            after = _heartbeat(broker, 1, orders_id)  # the client's retry: at its epoch, with its partition
            assert after["error_code"] == ErrorCode.none and after["member_id"] == "m-1", after
            assert after["member_epoch"] == 1
            member = broker.consumer_groups.groups["g"].members["m-1"]
            assert member.epoch == 1 and member.assigned == {"orders": frozenset({0})}
        finally:
            broker.cluster = broker.replicas = None
            broker.registry.close()

    asyncio.run(main())

"""Records and the high watermark go from the leader to its followers; acks=all waits for the ISR."""

import asyncio
import json
import os

from kio.schema.errors import ErrorCode

from freshet.format.record_batch import iter_batches

from .conftest import batch, log_bytes, produce, wait_until


def test_records_reach_every_follower_verbatim_and_the_high_watermark_follows(run):
    async def scenario(cluster):
        await cluster.replicated_topic("orders", (0, 1, 2))
        connection = await cluster.connect(0)
        offsets = []
        for i in range(5):
            answer, _ = await produce(connection, "orders", batch(b"a%d" % i, b"b%d" % i), acks=-1)
            assert answer.error_code == ErrorCode.none
            offsets.append(answer.base_offset)
        assert offsets == [0, 2, 4, 6, 8]
        leader = cluster.partition(0, "orders")
        # acks=all answered: every ISR member had the batch, so the high watermark is past it
        assert leader.high_watermark == leader.log_end_offset == 10
        for node in (1, 2):
            follower = cluster.partition(node, "orders")
            await wait_until(lambda: follower.high_watermark == 10, f"broker {node}'s high watermark reaching 10")
            assert follower.log_end_offset == 10
            assert log_bytes(follower) == log_bytes(leader)  # offsets, leader epochs, CRCs: as the leader wrote
        assert [h.partition_leader_epoch for h, _ in iter_batches(log_bytes(leader))] == [0] * 5
        for node in (0, 1, 2):
            assert cluster.partition(node, "orders").leader_epochs.entries == [(0, 0)]
            assert os.path.exists(os.path.join(cluster.partition(node, "orders").directory, "leader-epoch-checkpoint"))
        connection.close()

    run(scenario)


def test_the_leader_stamps_its_epoch_into_every_batch(run):
    async def scenario(cluster):
        await cluster.replicated_topic("stamped", (0, 1), leader_epoch=7)
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "stamped", batch(b"x"), acks=-1)
        assert answer.error_code == ErrorCode.none
        follower = cluster.partition(1, "stamped")
        await wait_until(lambda: follower.high_watermark == 1, "the follower's high watermark reaching 1")
        for node in (0, 1):
            headers = [h for h, _ in iter_batches(log_bytes(cluster.partition(node, "stamped")))]
            assert [h.partition_leader_epoch for h in headers] == [7]
            assert cluster.partition(node, "stamped").leader_epochs.entries == [(7, 0)]
        connection.close()

    run(scenario, count=2)


def test_acks_1_answers_after_the_local_write_while_a_follower_is_away(run):
    async def scenario(cluster):
        await cluster.replicated_topic("quick", (0, 1))
        await cluster.stop_broker(1)  # the follower is gone; its lag is not up yet (10 s)
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "quick", batch(b"x"), acks=1)
        assert answer.error_code == ErrorCode.none and answer.base_offset == 0
        leader = cluster.partition(0, "quick")
        assert leader.log_end_offset == 1
        assert leader.high_watermark == 0  # not readable before the ISR has it
        assert cluster.alter_calls == []
        connection.close()

    run(scenario, count=2)


def test_acks_all_waits_until_the_isr_has_the_batch(run):
    """A follower that stopped fetching holds acks=all writes back until it leaves the ISR (after
    replica.lag.time.max.ms); then they are answered, with the ISR shrunk through alter_isr."""
    async def scenario(cluster):
        await cluster.replicated_topic("waits", (0, 1, 2))
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "waits", batch(b"first"), acks=-1)
        assert answer.error_code == ErrorCode.none
        await cluster.stop_broker(2)
        answer, _ = await produce(connection, "waits", batch(b"second"), acks=-1)
        cluster.events.append(f"answered {answer.error_code.name} at {answer.base_offset}")
        assert cluster.events == ["shrink waits-0 to [0, 1]", "answered none at 1"]
        assert cluster.alter_calls == [(0, "waits", 0, 0, 0, (0, 1))]
        assert cluster.partition(0, "waits").high_watermark == 2
        connection.close()

    run(scenario, lag_ms=1500)


def test_a_follower_starts_fetching_once_the_metadata_names_its_leaders_endpoint(run):
    async def scenario(cluster):
        cluster.create_topic("later", replicas=(0, 1))
        endpoints = cluster.endpoints
        await cluster.brokers[0].replicas.apply(list(cluster.states.values()), endpoints)
        await cluster.brokers[1].replicas.apply(list(cluster.states.values()), {1: endpoints[1]})  # no leader's
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "later", batch(b"x"), acks=1)
        assert answer.error_code == ErrorCode.none
        await cluster.apply()  # now broker 1 knows where broker 0 listens
        follower = cluster.partition(1, "later")
        await wait_until(lambda: follower.high_watermark == 1, "the follower fetching once it knows the leader")
        connection.close()

    run(scenario, count=2)


def test_a_follower_behind_the_leaders_log_start_starts_its_log_there(run):
    async def scenario(cluster):
        await cluster.replicated_topic("trimmed", (0, 1), isr=(0,), nodes=[0])
        connection = await cluster.connect(0)
        for value in (b"a", b"b", b"c"):
            answer, _ = await produce(connection, "trimmed", batch(value), acks=-1)
            assert answer.error_code == ErrorCode.none
        assert cluster.partition(0, "trimmed").advance_log_start(2) == 2  # DeleteRecords on the leader
        await cluster.apply(nodes=[1])
        follower = cluster.partition(1, "trimmed")
        await wait_until(lambda: follower.log_end_offset == 3, "the follower fetching from the leader's log start")
        assert follower.log_start_offset == 2
        assert log_bytes(follower) and log_bytes(follower) == log_bytes(cluster.partition(0, "trimmed"))
        connection.close()

    run(scenario, count=2)


def test_a_topic_gone_from_the_metadata_leaves_nothing_behind_in_the_replica_manager(run):
    """Its leader and follower state go, its fetcher closes, and its high watermark leaves the
    replication-offset-checkpoint: nothing grows with every topic ever deleted."""
    async def scenario(cluster):
        await cluster.replicated_topic("kept", (0, 1))
        await cluster.replicated_topic("deleted", (0, 1))
        manager, follower = cluster.brokers[0].replicas, cluster.brokers[1].replicas
        manager.checkpoint()
        del cluster.states[("deleted", 0)]
        await cluster.apply()
        for replicas in (manager, follower):
            assert ("deleted", 0) not in replicas.leaders and ("deleted", 0) not in replicas.followed
            assert ("deleted", 0) not in replicas._started
        assert list(follower.fetchers[0].partitions) == [("kept", 0)]
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "kept", batch(b"x"), acks=-1)  # a high watermark moves
        connection.close()
        assert answer.error_code == ErrorCode.none
        manager.checkpoint()
        with open(manager._checkpoint_path) as f:
            assert list(json.load(f)) == ["kept/0"]

    run(scenario, count=2)



def test_metadata_applied_after_close_starts_nothing(run):
    """The control plane may deliver one last metadata while the broker stops: a closed replica manager takes no
    role, opens no fetcher connection and starts no task (they would outlive the broker)."""
    async def scenario(cluster):
        await cluster.replicated_topic("closing", (0, 1))
        follower = cluster.brokers[1].replicas
        assert follower.fetchers and follower.followed
        await follower.close()
        await follower.apply(list(cluster.states.values()), cluster.endpoints)
        assert not follower.fetchers and not follower.followed and not follower.leaders
        assert all(t.done() for t in (follower._checker, follower._checkpointer))

    run(scenario, count=2)


def test_a_follower_moves_its_log_start_with_its_leaders(run):
    """DeleteRecords (or retention) on the leader moves its log start; the follower's follows with the next fetch
    (Kafka's follower: maybeIncrementLogStartOffset from the fetch response), bounded by its high watermark."""
    async def scenario(cluster):
        await cluster.replicated_topic("start", (0, 1))
        connection = await cluster.connect(0)
        for value in (b"a", b"b", b"c"):
            answer, _ = await produce(connection, "start", batch(value), acks=-1)
            assert answer.error_code == ErrorCode.none
        connection.close()
        follower = cluster.partition(1, "start")
        await wait_until(lambda: follower.high_watermark == 3, "the follower's high watermark")
        assert cluster.partition(0, "start").advance_log_start(2) == 2
        await wait_until(lambda: follower.log_start_offset == 2, "the follower's log start", 30)
        assert follower.log_end_offset == 3

    run(scenario, count=2)

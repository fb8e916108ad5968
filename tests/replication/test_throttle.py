"""The replication throttle (leader/follower.replication.throttled.rate and .replicas): a follower out of the ISR
is held to the rate, from the leader's side or its own; a client's fetch is not; an in-sync follower is not; lifted,
the follower catches up and joins the ISR. Quotas and config values on their own at the end."""

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.replication.throttle import ReplicationQuota, parse_rate, throttled_partitions

from .conftest import batch, produce, wait_until

PIECE = b"x" * 100_000


async def fill(cluster, topic: str, batches: int = 30, acks: int = 1) -> int:
    """~3 MB into the leader (broker 0): three times what one fetch brings (1 MB a partition)."""
    connection = await cluster.connect(0)
    for _ in range(batches):
        answer, _ = await produce(connection, topic, batch(PIECE), acks=acks)
        assert answer.error_code == ErrorCode.none
    connection.close()
    leader = cluster.partition(0, topic)
    # acks=1 may be answered before the fsync that moves the high watermark: a follower fetching at a high watermark
    # still at 0 would be let into the ISR at once (and so never throttled)
    await wait_until(lambda: leader.high_watermark == leader.log_end_offset, "the leader's high watermark at its end")
    return leader.log_end_offset


async def held_then_released(cluster, throttled_node: int, side: str) -> None:
    topic = f"held-by-{side}"
    # the follower (broker 1) out of the ISR, as a new replica of a reassignment is; broker 0 leads alone
    await cluster.replicated_topic(topic, (0, 1), isr=(0,), nodes=[0])
    end = await fill(cluster, topic)
    throttle = cluster.brokers[throttled_node].replicas.throttle
    if side == "leader":
        throttle.update(1000, None, {(topic, 0)}, set())
    else:
        throttle.update(None, 1000, set(), {(topic, 0)})
    await cluster.apply([1])  # broker 1 starts following
    follower = cluster.partition(1, topic)
    await wait_until(lambda: follower.log_end_offset > 0, "the follower's first fetch")
    quota = throttle.leader if side == "leader" else throttle.follower
    assert quota.exceeded() and quota.throttled_bytes > 0  # one fetch's worth took the whole second and more
    if side == "leader":  # the follower asks again and again, and gets nothing
        progress = cluster.brokers[0].replicas.leaders[(topic, 0)].followers[1]
        fetches = set()
        await wait_until(lambda: fetches.add(progress.last_fetch_ms) or len(fetches) >= 4,
                         "the follower fetching again and again")
    else:  # the follower leaves the partition out of its fetches until its second's worth of bytes is back
        assert throttle.hold_follower((topic, 0), in_sync=False) and quota.delay_s() > 60
    assert 0 < follower.log_end_offset < end  # held: it has not caught up
    assert follower.size_bytes <= 1.2 * (1 << 20)
    # a client's fetch is not throttled: it reads the whole log at once
    connection = await cluster.connect(0)
    response = await connection.request(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                    "last_fetched_epoch": -1, "log_start_offset": -1,
                                                    "partition_max_bytes": 8 << 20}]}]})
    assert len(response.responses[0].partitions[0].records) > 2 * (1 << 20)
    connection.close()
    throttle.update(None, None, set(), set())  # lifted: it catches up and joins the ISR
    await wait_until(lambda: follower.log_end_offset == end, "the follower catching up")
    await wait_until(lambda: cluster.states[(topic, 0)].isr == (0, 1), "the follower back in the ISR")


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_throttled_follower_out_of_the_isr_is_held_to_the_rate_and_clients_are_not(run, side):
    async def scenario(cluster):
        await held_then_released(cluster, 0 if side == "leader" else 1, side)

    run(scenario, count=2)


def test_an_in_sync_follower_is_never_throttled(run):
    async def scenario(cluster):
        await cluster.replicated_topic("in-sync", (0, 1))
        for node, (leader_rate, follower_rate) in ((0, (1000, None)), (1, (None, 1000))):
            cluster.brokers[node].replicas.throttle.update(leader_rate, follower_rate, {("in-sync", 0)},
                                                           {("in-sync", 0)})
        end = await fill(cluster, "in-sync", acks=-1)  # acks=all: answered only once the follower has it all
        assert cluster.partition(1, "in-sync").log_end_offset == end
        assert cluster.brokers[0].replicas.throttle.leader.throttled_bytes == 0

    run(scenario, count=2)


def test_the_quota_is_a_token_bucket_of_one_seconds_bytes():
    now = [100.0]
    quota = ReplicationQuota(clock=lambda: now[0])
    assert not quota.exceeded() and quota.delay_s() == 0  # no rate: unlimited
    quota.record(10**9)
    assert not quota.exceeded()
    quota.set_rate(1000)
    assert not quota.exceeded()
    quota.record(3000)  # one fetch may go past the rate
    assert quota.exceeded() and quota.delay_s() == pytest.approx(2.0)
    now[0] += 1.5
    assert quota.exceeded()
    now[0] += 0.6
    assert not quota.exceeded()
    now[0] += 100  # idle time saves up one second's bytes at most
    quota.record(1001)
    assert quota.exceeded()


def test_config_values():
    assert parse_rate("1048576") == 1048576 and parse_rate(None) is None and parse_rate("x") is None
    assert throttled_partitions("*", 3, 2) == {0, 1, 2}
    assert throttled_partitions("0:1,1:2, 2:2", 3, 2) == {1, 2}
    assert throttled_partitions("", 3, 2) == set() and throttled_partitions(None, 3, 2) == set()


def test_a_rate_changed_keeps_the_debt_and_a_new_rate_starts_with_a_full_second():
    now = [0.0]
    quota = ReplicationQuota(clock=lambda: now[0])
    quota.set_rate(1000)
    quota.record(1000)  # the second's bytes spent exactly: nothing left
    quota.set_rate(500)  # a lower rate gives no bytes back
    quota.record(1)
    assert quota.exceeded() and quota.delay_s() == pytest.approx(0.002)
    quota.set_rate(None)  # lifted, then set again: a fresh second's worth
    quota.set_rate(2000)
    quota.record(1500)
    assert not quota.exceeded()

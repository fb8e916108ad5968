"""KIP-497's maximal ISR: while the leader's AlterPartition adding a follower is out, acks=all waits for that
follower too. Otherwise a write acknowledged by the old ISR alone in that window could be missing on a replica the
controller makes leader on that very change (a reassignment completes when its last replica joins the ISR)."""

import asyncio

from kio.schema.errors import ErrorCode

from .conftest import batch, produce, wait_until


async def follower_being_added(cluster) -> asyncio.Event:
    """Topic ``joining``: broker 0 leads, broker 1 catches up and broker 0's AlterPartition adding it goes out and
    stays unanswered (until the event is set); then broker 1 stops fetching (it sees no leader)."""
    await cluster.replicated_topic("joining", (0, 1), isr=(0,), nodes=[0])  # broker 1 out of the ISR
    manager = cluster.brokers[0].replicas
    calls, answer = [], asyncio.Event()

    async def slow_controller(topic, index, leader_epoch, partition_epoch, new_isr):
        calls.append(tuple(new_isr))
        await answer.wait()  # the change is out; the controller has not answered
        return {"error": "REQUEST_TIMED_OUT", "error_code": 7, "message": "the test's", "value": None}

    manager.alter_isr = slow_controller
    await cluster.apply([1])  # broker 1 follows, catches up, and the leader asks to add it
    await wait_until(lambda: calls, "the leader asking to add broker 1")
    assert calls == [(0, 1)]
    state = cluster.states[("joining", 0)]
    cluster.set_state("joining", leader=-1)
    await cluster.apply([1])
    cluster.states[("joining", 0)] = state
    return answer


async def acks_all_times_out(cluster) -> None:
    """Not acknowledged by broker 0 alone: broker 1 may be in the ISR already, without the record."""
    connection = await cluster.connect(0)
    result, _ = await produce(connection, "joining", batch(b"x"), acks=-1, timeout_ms=2000)
    connection.close()
    assert result.error_code == ErrorCode.request_timed_out


def test_a_follower_being_added_to_the_isr_counts_for_acks_all_before_the_controller_answers(run):
    async def scenario(cluster):
        answer = await follower_being_added(cluster)
        await acks_all_times_out(cluster)
        answer.set()

    run(scenario, count=2)


def test_other_metadata_while_the_change_is_out_keeps_the_follower_being_added_counted(run):
    # the brokers get the whole metadata after every change anywhere (another partition's ISR, a topic created):
    # the same state of this partition again must not drop the follower being added from the high watermark
    async def scenario(cluster):
        answer = await follower_being_added(cluster)
        cluster.create_topic("elsewhere", 1, (0, 1))
        await cluster.apply([0])  # a change elsewhere: this partition's state (and partition epoch) as it was
        await acks_all_times_out(cluster)
        answer.set()

    run(scenario, count=2)

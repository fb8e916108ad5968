"""KIP-497's maximal ISR: while the leader's AlterPartition adding a follower is out, acks=all waits for that
follower too. Otherwise a write acknowledged by the old ISR alone in that window could be missing on a replica the
controller makes leader on that very change (a reassignment completes when its last replica joins the ISR)."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from .conftest import batch, produce, wait_until


async def follower_being_added(cluster, error: str = "REQUEST_TIMED_OUT") -> asyncio.Event:
    """Topic ``joining``: broker 0 leads, broker 1 catches up and broker 0's AlterPartition adding it goes out and
    stays unanswered until the event is set (then refused with ``error``); then broker 1 stops fetching (it sees no
    leader)."""
    await cluster.replicated_topic("joining", (0, 1), isr=(0,), nodes=[0])  # broker 1 out of the ISR
    manager = cluster.brokers[0].replicas
    calls, answer = [], asyncio.Event()

    async def slow_controller(topic, index, leader_epoch, partition_epoch, new_isr):
        calls.append(tuple(new_isr))
        await answer.wait()  # the change is out; the controller has not answered
        return {"error": error, "error_code": ErrorCode[error.lower()].value, "message": "the test's", "value": None}

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


@pytest.mark.parametrize("error, kept", [
    ("INVALID_UPDATE_VERSION", True),  # an earlier try of the same change (its answer lost) may have been applied
    ("REQUEST_TIMED_OUT", True),  # no controller answered in time: unknown
    ("INELIGIBLE_REPLICA", False),  # checked against the current partition epoch: not applied
])
def test_a_refused_change_keeps_the_follower_counted_unless_the_controller_says_it_was_not_made(run, error, kept):
    # as Kafka's Partition.handleAlterPartitionError: the maximal ISR goes back to the committed one only on an
    # answer that says the change was not made; otherwise the metadata (a newer partition epoch) says
    async def scenario(cluster):
        answer = await follower_being_added(cluster, error)
        leader = cluster.brokers[0].replicas.leaders[("joining", 0)]
        answer.set()
        await wait_until(lambda: not leader._altering, "the refusal taken")
        if kept:
            await acks_all_times_out(cluster)
        else:
            connection = await cluster.connect(0)
            result, _ = await produce(connection, "joining", batch(b"x"), acks=-1, timeout_ms=30_000)
            connection.close()
            assert result.error_code == ErrorCode.none  # broker 0 alone is the ISR

    run(scenario, count=2)


def test_a_change_of_unknown_outcome_is_asked_again_for_an_answer(run):
    # kept counting after REQUEST_TIMED_OUT, the follower would hold the high watermark for good were it never
    # asked again (it may have stopped fetching): the ISR check sends the change again, and the answer settles it
    async def scenario(cluster):
        answer = await follower_being_added(cluster)
        manager = cluster.brokers[0].replicas
        leader = manager.leaders[("joining", 0)]
        answer.set()
        await wait_until(lambda: not leader._altering, "the timeout taken")
        manager.alter_isr = cluster._alter_isr_of(0)  # the controller answers again
        await wait_until(lambda: "expand joining-0 to [0, 1]" in cluster.events, "the change sent again")
        await wait_until(lambda: not leader._joining, "the follower counted as the ISR says")

    run(scenario, count=2, lag_ms=2000)

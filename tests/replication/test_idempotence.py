"""An idempotent producer carries on across a leader change: the followers' producer state follows the batches
they append, so the new leader checks sequence numbers where the old one left off."""

from kio.schema.errors import ErrorCode

from .conftest import batch, produce, wait_until

PID = 4242


def test_sequences_keep_working_on_the_new_leader(run):
    async def scenario(cluster):
        await cluster.replicated_topic("idem", (0, 1))
        old = await cluster.connect(0)
        first, _ = await produce(old, "idem", batch(b"a", b"b", producer_id=PID, producer_epoch=0, base_sequence=0))
        second_batch = batch(b"c", b"d", b"e", producer_id=PID, producer_epoch=0, base_sequence=2)
        second, _ = await produce(old, "idem", second_batch)
        assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (
            ErrorCode.none, 0, ErrorCode.none, 2)
        follower = cluster.partition(1, "idem")
        await wait_until(lambda: follower.high_watermark == 5, "the follower's high watermark reaching 5")
        assert follower.producer_state.producers[PID].last_sequence == 4
        old.close()

        cluster.set_state("idem", leader=1, leader_epoch=1, partition_epoch=1)
        await cluster.apply()
        new = await cluster.connect(1)
        retried, _ = await produce(new, "idem", second_batch)  # the retry of a batch the old leader wrote
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
        assert follower.log_end_offset == 5  # answered as the duplicate it is, not written again
        third, _ = await produce(new, "idem", batch(b"f", producer_id=PID, producer_epoch=0, base_sequence=5))
        assert (third.error_code, third.base_offset) == (ErrorCode.none, 5)
        gap, _ = await produce(new, "idem", batch(b"h", producer_id=PID, producer_epoch=0, base_sequence=9))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        after, _ = await produce(new, "idem", batch(b"i", producer_id=PID, producer_epoch=0, base_sequence=6),
                                  version=3)
        assert after.error_code == ErrorCode.none  # an older Produce version: the same state
        # and the old leader, now a follower, holds the same producer state
        deposed = cluster.partition(0, "idem")
        await wait_until(lambda: deposed.log_end_offset == 7, "the old leader following the new one")
        assert deposed.producer_state.producers[PID].last_sequence == 6
        new.close()

    run(scenario, count=2)

"""min.insync.replicas refusals and ISR changes reported through alter_isr."""

from kio.schema.errors import ErrorCode

from .conftest import batch, produce, wait_until


def test_acks_all_below_min_insync_is_refused_and_writes_nothing(run):
    async def scenario(cluster):
        await cluster.replicated_topic("strict", (0, 1, 2), configs={"min.insync.replicas": "2"}, isr=(0,))
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "strict", batch(b"x"), acks=-1)
        assert answer.error_code == ErrorCode.not_enough_replicas
        assert "min.insync.replicas=2" in answer.error_message
        assert cluster.partition(0, "strict").log_end_offset == 0  # nothing appended
        answer, _ = await produce(connection, "strict", batch(b"y"), acks=1)  # acks=1 does not ask for the ISR
        assert answer.error_code == ErrorCode.none and answer.base_offset == 0
        connection.close()

    run(scenario)


def test_an_isr_that_shrinks_below_min_insync_while_waiting_answers_after_append(run):
    async def scenario(cluster):
        await cluster.replicated_topic("shrinks", (0, 1, 2), configs={"min.insync.replicas": "3"})
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "shrinks", batch(b"all three"), acks=-1)
        assert answer.error_code == ErrorCode.none
        await cluster.stop_broker(2)
        answer, _ = await produce(connection, "shrinks", batch(b"two left"), acks=-1)
        assert answer.error_code == ErrorCode.not_enough_replicas_after_append
        assert answer.base_offset == -1  # as Kafka: an error names no offset
        assert cluster.events == ["shrink shrinks-0 to [0, 1]"]
        # written and replicated to what is left of the ISR, only not acknowledged as asked
        assert cluster.partition(0, "shrinks").high_watermark == 2
        answer, _ = await produce(connection, "shrinks", batch(b"refused"), acks=-1)
        assert answer.error_code == ErrorCode.not_enough_replicas
        connection.close()

    run(scenario, lag_ms=1500)


def test_a_follower_that_catches_up_rejoins_the_isr(run):
    async def scenario(cluster):
        await cluster.replicated_topic("rejoin", (0, 1, 2))
        connection = await cluster.connect(0)
        await cluster.stop_broker(2)
        for i in range(3):
            answer, _ = await produce(connection, "rejoin", batch(b"%d" % i), acks=-1)
            assert answer.error_code == ErrorCode.none
        assert cluster.states[("rejoin", 0)].isr == (0, 1)
        assert cluster.brokers[0].replicas.under_replicated_partitions == 1
        await cluster.start_broker(2)  # same data directory: it has offset 0 only... and the topic
        await cluster.apply()
        await wait_until(lambda: cluster.states[("rejoin", 0)].isr == (0, 1, 2), "broker 2 back in the ISR")
        assert cluster.events == ["shrink rejoin-0 to [0, 1]", "expand rejoin-0 to [0, 1, 2]"]
        assert cluster.alter_calls[-1] == (0, "rejoin", 0, 0, 1, (0, 1, 2))
        assert cluster.brokers[0].replicas.isr_shrinks == 1 and cluster.brokers[0].replicas.isr_expands == 1
        assert cluster.brokers[0].replicas.under_replicated_partitions == 0
        follower = cluster.partition(2, "rejoin")
        await wait_until(lambda: follower.high_watermark == 3, "broker 2's high watermark reaching 3")
        connection.close()

    run(scenario, lag_ms=1500)


def test_a_refused_isr_change_changes_nothing_here(run):
    async def scenario(cluster):
        await cluster.replicated_topic("refused", (0, 1))
        cluster.refuse_alter = True
        await cluster.stop_broker(1)
        await wait_until(lambda: len(cluster.alter_calls) >= 2, "the leader asking (twice) to shrink the ISR")
        leader = cluster.brokers[0].replicas.leaders[("refused", 0)]
        assert leader.isr == (0, 1)
        assert all(call[-1] == (0,) for call in cluster.alter_calls)
        assert cluster.brokers[0].replicas.role("refused", 0).isr == (0, 1)

    run(scenario, count=2, lag_ms=600)


def test_an_isr_answer_older_than_the_metadata_already_applied_changes_nothing(run):
    """The controller's answer to AlterPartition can come after the metadata that carries it, and after a later
    change too (a follower fenced: partition epoch + 2). The late answer must not take the leader back to the
    older ISR and partition epoch: every later AlterPartition would be refused as stale."""
    async def scenario(cluster):
        await cluster.replicated_topic("late", (0, 1, 2), nodes=[0])  # brokers 1 and 2 do not fetch
        manager = cluster.brokers[0].replicas
        leader = manager.leaders[("late", 0)]

        async def late_alter_isr(topic, index, leader_epoch, partition_epoch, new_isr):
            cluster.set_state("late", isr=(0, 1), partition_epoch=1)  # this change, committed
            cluster.set_state("late", isr=(0,), partition_epoch=2)  # then broker 1 fenced by the controller
            await cluster.apply(nodes=[0])  # both reach the leader through the metadata first
            return {"error": "NONE", "error_code": 0, "message": "",
                    "value": {"isr": [0, 1], "partition_epoch": 1}}

        manager.alter_isr = late_alter_isr
        leader._alter((0, 1), "shrink")
        await wait_until(lambda: not leader._altering, "the AlterPartition answered")
        assert (leader.isr, leader.partition_epoch) == ((0,), 2)
        assert manager.role("late", 0).isr == (0,) and manager.role("late", 0).partition_epoch == 2

    run(scenario)

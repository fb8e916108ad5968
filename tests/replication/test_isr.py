"""min.insync.replicas refusals and ISR changes reported through alter_isr; the lag rule of
replica.lag.time.max.ms (Kafka's Replica.isCaughtUp / lastCaughtUpTimeMs)."""

import asyncio
import time

from kio.schema.errors import ErrorCode

from freshet.broker.replication import follower as follower_module

from .conftest import batch, log_bytes, produce, wait_until


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
        connection = await cluster.connect(0)  # a record broker 1 lacks (a caught-up follower is never shrunk)
        answer, _ = await produce(connection, "refused", batch(b"x"), acks=1)
        assert answer.error_code == ErrorCode.none
        connection.close()
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


class FetchGate:
    """Holds a follower broker's replica fetcher before each Fetch it sends until the test allows one (the
    follower stays alive and connected: it only fetches when told)."""

    def __init__(self, cluster, node: int, leader: int) -> None:
        self.fetcher = cluster.brokers[node].replicas.fetchers[leader]
        self.permits = asyncio.Semaphore(0)
        self.sent = 0
        self.waiting = False
        self._original = self.fetcher._fetch

        async def gated(active):
            self.waiting = True
            await self.permits.acquire()
            self.waiting = False
            self.sent += 1
            await self._original(active)

        self.fetcher._fetch = gated

    async def allow_one(self) -> None:
        sent = self.sent
        self.permits.release()
        await wait_until(lambda: self.sent > sent, "the follower sending the fetch it was allowed")

    def open(self) -> None:
        self.fetcher._fetch = self._original
        for _ in range(100):  # whatever fetch is held goes on
            self.permits.release()


def test_a_follower_that_fetches_but_stays_behind_leaves_the_isr_after_the_lag_time_and_rejoins(run, monkeypatch):
    """Kafka's rule, not a dead follower: broker 1 fetches all along, one batch per Fetch (replica.fetch.max.bytes
    of 1 byte: KIP-74's first batch whole), while the leader always holds at least two batches more. It never
    reaches the leader's log end, so its last caught-up moment stays where it was and the leader removes it
    (AlterPartition) once replica.lag.time.max.ms has passed since then, not before; once it may fetch freely it
    reaches the log end and the leader adds it back."""
    lag_ms = 1500
    monkeypatch.setattr(follower_module, "PARTITION_MAX_BYTES", 1)

    async def scenario(cluster):
        await cluster.replicated_topic("behind", (0, 1))
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "behind", batch(b"first"), acks=-1)
        assert answer.error_code == ErrorCode.none
        leader_log, follower_log = cluster.partition(0, "behind"), cluster.partition(1, "behind")
        progress = cluster.brokers[0].replicas.leaders[("behind", 0)].followers[1]
        gate = FetchGate(cluster, node=1, leader=0)
        await wait_until(lambda: gate.waiting, "the follower's fetch in flight answered")
        started = time.monotonic()
        await gate.allow_one()  # a Fetch at the leader's log end, after `started`: its last caught-up moment
        await wait_until(lambda: progress.last_fetch_ms >= started * 1000, "the leader seeing that fetch")
        assert progress.log_end_offset == leader_log.log_end_offset == 1
        offsets = []
        while cluster.states[("behind", 0)].isr == (0, 1):
            while leader_log.log_end_offset < follower_log.log_end_offset + 3:
                answer, _ = await produce(connection, "behind", batch(b"more"), acks=1)
                assert answer.error_code == ErrorCode.none
            await gate.allow_one()
            offsets.append(follower_log.log_end_offset)
            assert time.monotonic() - started < 120, "broker 1 still in the ISR after 120 s"
        assert time.monotonic() - started >= lag_ms / 1000  # not before replica.lag.time.max.ms
        assert cluster.events == ["shrink behind-0 to [0]"]
        assert cluster.alter_calls == [(0, "behind", 0, 0, 0, (0,))]
        # it was fetching, and getting records, the whole time
        assert len(offsets) >= 3 and offsets[-1] > offsets[0] >= 1
        assert follower_log.log_end_offset < leader_log.log_end_offset
        gate.open()
        await wait_until(lambda: cluster.states[("behind", 0)].isr == (0, 1), "broker 1 back in the ISR")
        assert cluster.events == ["shrink behind-0 to [0]", "expand behind-0 to [0, 1]"]
        manager = cluster.brokers[0].replicas
        assert (manager.isr_shrinks, manager.isr_expands, manager.under_replicated_partitions) == (1, 1, 0)
        await wait_until(lambda: follower_log.durable_offset == leader_log.log_end_offset, "broker 1 caught up")
        assert log_bytes(follower_log) == log_bytes(leader_log)
        connection.close()

    run(scenario, count=2, lag_ms=lag_ms)


def test_a_caught_up_follower_of_an_idle_partition_stays_in_the_isr_however_long_it_does_not_fetch(run):
    """As Kafka's isCaughtUp (log end offset = the leader's): with nothing produced, broker 1 stays in the ISR
    through ten ISR checks (five replica.lag.time.max.ms) although it sends no Fetch at all. The first record it
    lacks makes it out of sync at the next check, its last caught-up moment being that old."""
    async def scenario(cluster):
        await cluster.replicated_topic("idle", (0, 1))
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "idle", batch(b"only"), acks=-1)
        assert answer.error_code == ErrorCode.none
        leader = cluster.brokers[0].replicas.leaders[("idle", 0)]
        gate = FetchGate(cluster, node=1, leader=0)
        await wait_until(lambda: gate.waiting, "the follower's fetch in flight answered")
        sent = gate.sent
        checks = []
        check_lagging = leader.check_lagging

        def counted():
            checks.append(leader.followers[1].log_end_offset)
            check_lagging()

        leader.check_lagging = counted
        await wait_until(lambda: len(checks) >= 10, "ten ISR checks")
        assert gate.sent == sent and checks == [1] * len(checks)  # no fetch since, its log end the leader's
        assert cluster.alter_calls == [] and leader.isr == (0, 1)
        assert cluster.brokers[0].replicas.isr_shrinks == 0
        answer, _ = await produce(connection, "idle", batch(b"lacked"), acks=1)
        assert answer.error_code == ErrorCode.none
        await wait_until(lambda: cluster.events == ["shrink idle-0 to [0]"], "broker 1 out of the ISR")
        gate.open()
        await wait_until(lambda: cluster.states[("idle", 0)].isr == (0, 1), "broker 1 back in the ISR")
        connection.close()

    run(scenario, count=2, lag_ms=300)

"""A leader change: the new leader's log is the truth; a returning follower cuts the suffix its old leadership
wrote that the new leader never had (OffsetForLeaderEpoch, KIP-101 / KIP-279) before it fetches."""

import asyncio
import threading

from kio.schema.errors import ErrorCode

from freshet.broker import durability
from freshet.format.record_batch import decode_records, iter_batches

from .conftest import batch, log_bytes, produce, wait_until


def values(partition) -> list[bytes]:
    return [r.value for _, b in iter_batches(log_bytes(partition)) for r in decode_records(b)]


async def write(cluster, node: int, topic: str, *items: bytes, acks: int = -1) -> list[int]:
    connection = await cluster.connect(node)
    try:
        offsets = []
        for item in items:
            answer, _ = await produce(connection, topic, batch(item), acks=acks)
            assert answer.error_code == ErrorCode.none, answer
            offsets.append(answer.base_offset)
        return offsets
    finally:
        connection.close()


def hold_fsync(monkeypatch, node: int, topic: str) -> threading.Event:
    """Broker ``node``'s fsyncs of ``topic`` wait (in the fsync thread) until the returned event is set."""
    release = threading.Event()
    real_fsync_all = durability._fsync_all

    def held_fsync_all(segments, pool=None):
        if any(f"broker-{node}" in s.path and topic in s.path for s in segments):
            release.wait(120)
        return real_fsync_all(segments, pool)

    monkeypatch.setattr(durability, "_fsync_all", held_fsync_all)
    return release


def record_reports(leader, follower) -> list[tuple[int, int]]:
    """(fetch offset, the follower partition's durable offset then) of every replica fetch ``leader`` counts."""
    reported = []
    real_fetched = leader.follower_fetched

    def fetched(replica_id, fetch_offset):
        reported.append((fetch_offset, follower.durable_offset))
        return real_fetched(replica_id, fetch_offset)

    leader.follower_fetched = fetched
    return reported


def test_a_deposed_leader_cuts_its_divergent_suffix_and_takes_the_new_leaders_log(run):
    async def scenario(cluster):
        await cluster.replicated_topic("history", (0, 1))
        assert await write(cluster, 0, "history", b"a", b"b", b"c") == [0, 1, 2]
        # broker 1 goes away; broker 0, alone in the ISR, writes two records nobody else has
        await cluster.stop_broker(1)
        cluster.set_state("history", isr=(0,), partition_epoch=1)
        await cluster.apply()
        assert await write(cluster, 0, "history", b"lost-1", b"lost-2", acks=1) == [3, 4]
        # broker 0 dies; broker 1 comes back and is made leader (epoch 1): its log ends at 3
        await cluster.stop_broker(0)
        await cluster.start_broker(1)
        cluster.set_state("history", leader=1, leader_epoch=1, isr=(1,), partition_epoch=2)
        await cluster.apply()
        assert await write(cluster, 1, "history", b"d", b"e", b"f") == [3, 4, 5]
        # broker 0 returns as a follower: cut at 3 (where epoch 0 ends on the leader), then fetch
        await cluster.start_broker(0)
        await cluster.apply()
        old = cluster.partition(0, "history")
        new = cluster.partition(1, "history")
        await wait_until(lambda: old.log_end_offset == 6 and old.high_watermark == 6, "broker 0 caught up")
        assert values(old) == [b"a", b"b", b"c", b"d", b"e", b"f"]
        assert log_bytes(old) == log_bytes(new)
        assert old.leader_epochs.entries == new.leader_epochs.entries == [(0, 0), (1, 3)]
        await wait_until(lambda: cluster.states[("history", 0)].isr == (0, 1), "broker 0 back in the ISR")

    run(scenario, count=2)


def test_a_follower_with_an_epoch_the_new_leader_never_saw_cuts_where_the_common_epoch_ends(run):
    """KIP-279: broker 0 led epoch 1 alone and wrote in it; broker 1 never saw epoch 1 and leads epoch 2. Asked for
    epoch 1, the leader answers with epoch 0 and where it ends; broker 0 cuts there."""
    async def scenario(cluster):
        await cluster.replicated_topic("epochs", (0, 1))
        assert await write(cluster, 0, "epochs", b"a", b"b", b"c") == [0, 1, 2]
        await cluster.stop_broker(1)
        cluster.set_state("epochs", leader_epoch=1, isr=(0,), partition_epoch=1)
        await cluster.apply()
        assert await write(cluster, 0, "epochs", b"x1", b"x2", acks=1) == [3, 4]
        assert cluster.partition(0, "epochs").leader_epochs.entries == [(0, 0), (1, 3)]
        await cluster.stop_broker(0)
        await cluster.start_broker(1)
        cluster.set_state("epochs", leader=1, leader_epoch=2, isr=(1,), partition_epoch=2)
        await cluster.apply()
        assert await write(cluster, 1, "epochs", b"d", b"e", b"f", b"g") == [3, 4, 5, 6]
        await cluster.start_broker(0)
        await cluster.apply()
        old, new = cluster.partition(0, "epochs"), cluster.partition(1, "epochs")
        await wait_until(lambda: old.log_end_offset == 7, "broker 0 caught up")
        assert values(old) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
        assert old.leader_epochs.entries == [(0, 0), (2, 3)]
        assert log_bytes(old) == log_bytes(new)

    run(scenario, count=2)


def test_a_leader_deposed_while_writes_wait_answers_them_not_leader(run):
    async def scenario(cluster):
        cluster.create_topic("deposed", replicas=(0, 1))
        await cluster.apply(nodes=[0])  # broker 1 is never told to follow: the write waits (lag 60 s)
        connection = await cluster.connect(0)
        pending = asyncio.ensure_future(produce(connection, "deposed", batch(b"x"), acks=-1, version=10))
        await wait_until(lambda: cluster.partition(0, "deposed").log_end_offset == 1 or pending.done(),
                         "the write appended")
        assert not pending.done(), pending.result()
        cluster.set_state("deposed", leader=1, leader_epoch=1, isr=(1,), partition_epoch=1)
        await cluster.apply(nodes=[0])
        answer, response = await pending
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (1, 1)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(1, cluster.brokers[1].port)]
        connection.close()

    run(scenario, count=2, lag_ms=60_000)


def test_a_restarted_leader_starts_from_its_checkpointed_high_watermark_not_its_log_end(run):
    """Records only the leader had when it stopped are not shown to consumers when it comes back as leader:
    its high watermark starts where the replication-offset-checkpoint says, and moves once followers have them."""
    async def scenario(cluster):
        await cluster.replicated_topic("restart", (0, 1))
        assert await write(cluster, 0, "restart", b"a", b"b") == [0, 1]
        await cluster.stop_broker(1)
        assert await write(cluster, 0, "restart", b"only-here", acks=1) == [2]
        assert cluster.partition(0, "restart").high_watermark == 2
        await cluster.stop_broker(0)
        await cluster.start_broker(0)
        reopened = cluster.partition(0, "restart")
        assert reopened.high_watermark == 3  # a partition opens at its log end, as on one node
        await cluster.apply(nodes=[0])
        assert reopened.high_watermark == 2
        await cluster.start_broker(1)
        await cluster.apply(nodes=[1])
        await wait_until(lambda: reopened.high_watermark == 3, "the follower fetching the third record")

    run(scenario, count=2)


def test_a_follower_whose_fsync_was_overtaken_by_a_leader_change_goes_on_fetching_its_other_partitions(
        run, monkeypatch):
    """Broker 1's fetcher for leader 0 waits for the fsync of what it appended to "moved" before its next fetch;
    meanwhile "moved" gets another leader, whose fetcher cuts that append away. The old fetcher must not wait
    for offsets the log no longer has: it still follows "stays" from broker 0."""
    async def scenario(cluster):
        cluster.create_topic("moved", replicas=(0, 1, 2))
        cluster.create_topic("stays", replicas=(0, 1))
        cluster.set_state("moved", isr=(0, 1))
        await cluster.apply(nodes=[0, 1])  # broker 2 has nothing of "moved"
        assert await write(cluster, 0, "stays", b"s0") == [0]
        follower_stays = cluster.partition(1, "stays")
        await wait_until(lambda: follower_stays.log_end_offset == 1, "broker 1 following stays")
        release = hold_fsync(monkeypatch, 1, "moved")
        assert await write(cluster, 0, "moved", b"m0", b"m1", acks=1) == [0, 1]
        follower_moved = cluster.partition(1, "moved")
        # its first append waits for the held fsync (the second record is fetched only after it)
        await wait_until(lambda: follower_moved.log_end_offset >= 1, "broker 1's append, its fsync held")
        cluster.set_state("moved", leader=2, leader_epoch=1, isr=(1, 2), partition_epoch=1)
        await cluster.apply()
        await wait_until(lambda: follower_moved.log_end_offset == 0, "broker 1 cut to the new leader's log")
        release.set()
        assert await write(cluster, 0, "stays", b"s1") == [1]
        await wait_until(lambda: follower_stays.log_end_offset == 2, "broker 1 still following stays", 30)

    run(scenario)


def test_a_follower_whose_fsync_failed_reports_only_what_is_on_its_disk(run, monkeypatch):
    """An fsync that fails on a follower leaves what it appended not durable: its next fetch must not tell the
    leader it has it (the leader's high watermark would count it). It cuts back to what is durable and fetches
    again."""
    real_fsync_all = durability._fsync_all
    failed = []

    def failing_once(segments, pool=None):
        frail = [s for s in segments if "broker-1" in s.path and "frail" in s.path]
        if frail and not failed:
            failed.extend(frail)
            return frail  # EIO: nothing of them is known to be on the disk
        return real_fsync_all(segments, pool)

    async def scenario(cluster):
        await cluster.replicated_topic("frail", (0, 1))
        leader = cluster.brokers[0].replicas.leaders[("frail", 0)]
        follower = cluster.partition(1, "frail")
        reported = record_reports(leader, follower)
        monkeypatch.setattr(durability, "_fsync_all", failing_once)
        assert await write(cluster, 0, "frail", b"a", b"b", acks=1) == [0, 1]
        await wait_until(lambda: failed and follower.durable_offset == 2, "broker 1's fsync failing, then done")
        await wait_until(lambda: cluster.partition(0, "frail").high_watermark == 2, "the high watermark")
        assert all(offset <= durable for offset, durable in reported), reported
        assert values(follower) == [b"a", b"b"]

    run(scenario, count=2)


def test_a_deposed_leader_does_not_report_what_it_wrote_but_has_not_fsynced_yet(run, monkeypatch):
    """Broker 0 led and appended two records its fsync has not covered yet; broker 1 (which has them) leads now.
    Broker 0's log agrees with the new leader's, nothing is cut, but what broker 0 tells its leader it has must
    still be what is on its disk: its fetch offset waits for that fsync."""
    async def scenario(cluster):
        await cluster.replicated_topic("unsynced", (0, 1))
        release = hold_fsync(monkeypatch, 0, "unsynced")
        assert await write(cluster, 0, "unsynced", b"a", b"b", acks=1) == [0, 1]
        old, new = cluster.partition(0, "unsynced"), cluster.partition(1, "unsynced")
        await wait_until(lambda: new.durable_offset == 2, "broker 1 having both records")
        assert old.durable_offset < 2
        cluster.set_state("unsynced", leader=1, leader_epoch=1, partition_epoch=1)
        await cluster.apply(nodes=[1])
        reported = record_reports(cluster.brokers[1].replicas.leaders[("unsynced", 0)], old)
        await cluster.apply(nodes=[0])
        await wait_until(lambda: reported, "broker 0 fetching from broker 1")
        release.set()
        await wait_until(lambda: any(offset == 2 for offset, _ in reported), "broker 0 reporting both, once synced")
        assert all(offset <= durable for offset, durable in reported), reported

    run(scenario, count=2)

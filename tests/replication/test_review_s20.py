"""Review of the broker/cluster work of session 20: leader changes and ListOffsets (KIP-207), share-group configs as
cluster metadata (group records of the previous version, DeleteGroups), the coordinators' one append wait. Each test
states Kafka's behaviour and fails (xfail strict) until the code does it; unit-level or in process where possible."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.groups.share import ShareGroupCoordinator, ShareMember
from freshet.broker.handlers.share_state import delete_share_group_in_cluster
from freshet.broker.topics.registry import TopicRegistry

from .conftest import batch, wait_until


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(run):
    """KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): a leader whose high watermark is below the start offset
    of its leader epoch (it knew the high watermark as a follower; its followers have not fetched from it yet)
    answers a client's ListOffsets LATEST, or a timestamp lookup past what it can serve, OFFSET_NOT_AVAILABLE
    (retriable), not the stale high watermark: a consumer resetting to latest, or the Spark source, took 0 right
    after a leader kill -9 and re-read or lost its place (tests/cluster/test_clients_failover.py retries in the
    Spark source only). EARLIEST is answered as ever; once the followers have caught up, LATEST is the HW."""
    async def scenario(cluster):
        cluster.create_topic("kip207", 1, replicas=(0, 1))
        log = cluster.partition(0, "kip207")
        log.append(batch(b"a", b"b", b"c"))  # what broker 0 holds (fsync'd) as the follower it was
        log.flush()
        log.high_watermark = 0  # ... the old leader's high watermark it last heard of
        cluster.set_state("kip207", leader=0, leader_epoch=1, partition_epoch=1)  # broker 1 not fetching yet
        await cluster.apply()
        connection = await cluster.connect(0)

        async def list_offsets(timestamp: int, isolation: int = 0):
            response = await connection.request(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": "kip207", "partitions": [{"partition_index": 0, "current_leader_epoch": 1,
                                                   "timestamp": timestamp}]}]})
            p = response.topics[0].partitions[0]
            return p.error_code, p.offset

        assert (await list_offsets(-2))[0] == ErrorCode.none  # EARLIEST
        assert (await list_offsets(-1))[0] == ErrorCode.offset_not_available
        assert (await list_offsets(-1, isolation=1))[0] == ErrorCode.offset_not_available
        assert (await list_offsets(0))[0] == ErrorCode.offset_not_available  # a timestamp: its record is past HW
        leader = cluster.brokers[0].replicas.leaders[("kip207", 0)]
        leader.follower_fetched(1, 3)  # the follower catches up: the high watermark reaches the epoch start
        assert log.high_watermark == 3
        assert await list_offsets(-1) == (ErrorCode.none, 3)
        connection.close()

    run(scenario, count=1)


def test_delete_groups_refused_non_empty_leaves_the_share_groups_configs(tmp_path):
    """DeleteGroups of a share group checks it has no members, then awaits DeleteShareGroupState and the controller
    (its configs), then deletes the group, which a member that joined meanwhile refuses (NON_EMPTY_GROUP). A
    refused DeleteGroups must change nothing: the group's configs (share.delivery.count.limit here) stay in the
    metadata; the group is either deleted with everything, or kept with everything."""
    registry = TopicRegistry(str(tmp_path))
    coordinator = ShareGroupCoordinator(registry, clustered=True)
    group = coordinator.group("g", create=True)
    coordinator.take_configs({"g": {"share.delivery.count.limit": "3"}})
    commands = []

    class Persister:
        async def delete(self, group_id, partitions):  # while the share coordinator deletes, a consumer joins
            await asyncio.sleep(0)
            group.members["late"] = ShareMember("late", 1, "consumer", "/127.0.0.1", None, ("t",))

    async def command(cmd, timeout_s=30.0):
        commands.append(cmd)
        return {"error": "NONE", "error_code": 0, "message": "", "value": None}

    async def wait_for(predicate, timeout_s=30.0):
        return True

    coordinator.persister = Persister()
    view = SimpleNamespace(topics={"t": SimpleNamespace(topic_id=uuid.uuid4(), partitions=(0,))})
    broker = SimpleNamespace(share_groups=coordinator,
                             cluster=SimpleNamespace(view=view, command=command, wait_for=wait_for))
    try:
        code = asyncio.run(delete_share_group_in_cluster(SimpleNamespace(broker=broker), "g"))
        if code == ErrorCode.none:
            assert "g" not in coordinator.groups
        else:
            assert "g" in coordinator.groups and commands == [], (code, commands)  # nothing changed
    finally:
        registry.close()


def test_a_produce_with_two_batches_for_one_partition_is_invalid_record(broker, topic_name):
    """Kafka's ProduceRequest.validateRecords: from v3 on, a partition's records are exactly one batch ('Produce
    requests with version 3 or above are only allowed to contain exactly one record batch per partition':
    INVALID_RECORD, nothing written). The broker took two, and so (a) answered record_errors whose batch_index names
    a record of *a* batch, which one unsaid, and (b) stored a retried two-batch request again (its idempotence check
    treats a multi-batch request as new: partition.py), duplicating acks=all writes."""
    from freshet.format.record_batch import encode_batch
    from freshet.testing.raw_kafka import RawConnection, produce
    from freshet.testing.topics import create_topic

    create_topic(broker.bootstrap, topic_name, 1)
    now = int(time.time() * 1000)
    two = encode_batch([(b"k", b"first", now)]) + encode_batch([(b"k", b"second", now)])
    with RawConnection(broker.bootstrap) as conn:
        answer = produce(conn, topic_name, 0, two)
        assert answer.error_code == ErrorCode.invalid_record
        assert produce(conn, topic_name, 0, encode_batch([(b"k", b"one", now)])).base_offset == 0  # nothing stored


def test_the_columnar_readers_end_offsets_waits_out_a_new_leaders_offset_not_available(run, monkeypatch):
    """freshet.client.columnar.RangeReader.end_offsets (the event-sourcing rebuilds' bulk read: where the inputs end
    now) asks ListOffsets LATEST. Right after a leader change the new leader answers OFFSET_NOT_AVAILABLE until its
    high watermark reaches its epoch's start (KIP-207): a retriable error, as librdkafka retries it; the reader must
    ask again (the metadata refreshed) within its timeout, not fail the rebuild, nor (before KIP-207) read to a
    stale end and miss committed records."""
    from freshet.client.columnar import RangeReader

    calls = []
    original = RangeReader._list_offsets

    def counted(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            calls.append(args)

    monkeypatch.setattr(RangeReader, "_list_offsets", counted)

    async def scenario(cluster):
        cluster.create_topic("ends", 1, replicas=(0, 1))
        log = cluster.partition(0, "ends")
        log.append(batch(b"a", b"b", b"c"))
        log.flush()
        log.high_watermark = 0
        cluster.set_state("ends", leader=0, leader_epoch=1, partition_epoch=1)
        await cluster.apply()
        reader = RangeReader(f"127.0.0.1:{cluster.brokers[0].port}", [], None,
                             options={"isolation.level": "read_uncommitted", "socket.timeout.ms": "30000"})
        ends = asyncio.ensure_future(asyncio.to_thread(reader.end_offsets, [("ends", 0)]))
        await wait_until(lambda: calls or ends.done(), "the reader's first ListOffsets")
        cluster.brokers[0].replicas.leaders[("ends", 0)].follower_fetched(1, 3)  # the follower catches up
        assert await ends == {("ends", 0): 3}

    run(scenario, count=1)


def test_a_broker_coordinating_again_forgets_a_consumer_group_deleted_meanwhile(tmp_path):
    """KIP-848 groups on a cluster (groups.consumer_records): broker A coordinates group g, then B does (a leader
    change of __consumer_offsets), where g's member leaves and g is deleted (tombstones for all its records), then A
    coordinates again and restores from the log. A still holds g in memory from its first tenure: the restore must
    drop it, as the classic groups' restore drops a tombstoned group; A kept g with its stale member (DescribeGroups
    showed it, DeleteGroups answered NON_EMPTY_GROUP)."""
    from freshet.broker.groups import consumer_records as cr
    from freshet.broker.groups.consumer import ConsumerGroupCoordinator
    from freshet.broker.groups.offsets import OffsetStore

    registry = TopicRegistry(str(tmp_path))
    registry.create("orders", 2)
    try:
        def coordinator():
            c = ConsumerGroupCoordinator(registry)
            store = cr.ConsumerGroupStore(c, OffsetStore(registry))
            c.on_change = store.changed
            return c, store

        def beat(c, epoch, owned=None):
            return c.heartbeat("g", "m-1", epoch, instance_id=None, rack_id=None,
                               rebalance_timeout_ms=45000 if epoch == 0 else -1,
                               subscribed_names=("orders",) if epoch == 0 else None, subscribed_regex=None,
                               server_assignor=None, owned={} if owned is None else owned, client_id="c",
                               client_host="/127.0.0.1", version=1)

        a, a_store = coordinator()
        beat(a, 0)  # A's first tenure: g with member m-1
        b, b_store = coordinator()
        cr.restore(b_store, cr.read(b_store.offsets.partition))  # B takes over
        member = b.group("g").members["m-1"]
        beat(b, -1)  # m-1 leaves on B ...
        b.delete("g")  # ... and g is deleted there: tombstones
        cr.restore(a_store, cr.read(a_store.offsets.partition))  # A coordinates again
        assert member.member_id and a.group("g") is None
    finally:
        registry.close()


_BOMBS = {  # (codec, the records section): 8 kB (zstd), 1.1 MB (lz4) that decompress to 256 MiB
    "zstd, two frames": "4, bytes(cramjam.zstd.compress(b'hello')) + bytes(cramjam.zstd.compress(bytes(256 << 20)))",
    "lz4, no end mark": "3, compress(3, bytes(256 << 20))[:-4]",
}
_BOMB = """
import resource, cramjam
from freshet.format.compression import compress, decompress
codec, payload = {payload}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decompress(codec, payload, limit=1 << 20)
    outcome = "accepted"
except Exception as exc:
    outcome = type(exc).__name__
print(outcome, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("bomb", list(_BOMBS))
def test_a_compressed_records_section_is_refused_before_it_fills_the_brokers_memory(bomb):
    """format.compression.decompress(limit=) is the produce path's guard against decompression bombs (a produced
    batch may decompress to at most 64 MiB, or 32 x max.message.bytes). Only the first zstd frame's content size and
    a complete lz4 frame's blocks were checked before cramjam decompressed everything: a first zstd frame of 5 bytes
    and a second of 256 MiB of zeros (8 kB) took 256 MiB before the refusal (a 1 MB batch so made: ~32 GB), an lz4
    frame without its end mark 256 MiB (1.1 MB) before CORRUPT_MESSAGE. Run in a process of its own, to read its
    peak memory."""
    import subprocess
    import sys

    script = _BOMB.replace("{payload}", _BOMBS[bomb])
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    outcome, grew_mb = out.stdout.split()
    assert outcome in ("PayloadTooLargeError", "CorruptPayloadError")
    assert int(grew_mb) < 32, f"{grew_mb} MB taken before the refusal"

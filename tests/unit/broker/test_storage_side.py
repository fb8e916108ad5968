"""The broker's storage-facing pieces in-process: topic registry, committed offsets, group commit, quotas."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.durability import GroupCommit
from freshet.broker.groups.offsets import CommittedOffset, OffsetStore
from freshet.broker.quotas import ClientQuotas
from freshet.broker.topics.registry import TopicError, TopicRegistry
from freshet.format.record_batch import encode_batch


def test_registry_creates_persists_and_refuses_bad_topics(tmp_path):
    registry = TopicRegistry(str(tmp_path))
    topic = registry.create("orders", 3, -1, {"retention.ms": "60000"})
    topic.partitions[1].append(encode_batch([(b"k", b"v", 1)]))
    registry.close()
    reopened = TopicRegistry(str(tmp_path))
    again = reopened.get("orders")
    assert again.topic_id == topic.topic_id and len(again.partitions) == 3
    assert again.configs == {"retention.ms": "60000"} and again.partitions[1].log_end_offset == 1
    for args, code in ((("orders", 1), ErrorCode.topic_already_exists),
                       (("bad name!", 1), ErrorCode.invalid_topic_exception),
                       (("x", 0), ErrorCode.invalid_partitions),
                       (("x", 1, 3), ErrorCode.invalid_replication_factor),
                       (("x", 1, -1, {"retention.ms": "soon"}), ErrorCode.invalid_config)):
        with pytest.raises(TopicError) as refused:
            reopened.create(*args)
        assert refused.value.error_code == code
    assert sorted(reopened.topics) == ["orders"]  # nothing refused was created
    with pytest.raises(TopicError):
        reopened.add_partitions("orders", 2)  # fewer than it has
    reopened.add_partitions("orders", 4)
    reopened.delete("orders")
    assert TopicRegistry(str(tmp_path)).get("orders") is None


def test_producer_ids_are_never_reused_after_a_restart(tmp_path):
    first = TopicRegistry(str(tmp_path)).producer_ids
    issued = {first.allocate() for _ in range(3)}
    second = TopicRegistry(str(tmp_path)).producer_ids  # as after kill -9: the block's end was written first
    assert second.allocate() > max(issued)


def test_committed_offsets_survive_a_restart_and_a_delete_removes_them(tmp_path):
    store = OffsetStore(TopicRegistry(str(tmp_path)))
    store.append("g", {("t", 0): CommittedOffset(42, -1, "meta", 1000), ("t", 1): CommittedOffset(7, 3, "", 1000)})
    store.append("g", {("t", 1): None})
    store.partition.flush()
    again = OffsetStore(TopicRegistry(str(tmp_path)))
    assert again.committed("g") == {("t", 0): CommittedOffset(42, -1, "meta", 1000)}
    assert again.groups() == ["g"]


def test_group_commit_advances_the_high_watermark_only_after_the_fsync(tmp_path):
    async def scenario():
        registry = TopicRegistry(str(tmp_path))
        partition = registry.create("t", 1).partitions[0]
        commit = GroupCommit()
        commit.start()
        try:
            appended = partition.append(encode_batch([(b"k", b"v%d" % i, 1) for i in range(5)]))
            assert partition.high_watermark == 0  # written, not yet durable: no reader sees it
            commit.written(partition)
            moved = commit.high_watermark_moved()
            await asyncio.wait_for(commit.durable(partition, appended.last_offset), 10)
            await asyncio.wait_for(moved, 10)
            assert partition.high_watermark == 5 and commit.rounds >= 1
        finally:
            await commit.stop()
            registry.close()

    asyncio.run(scenario())


def test_produce_quota_throttles_only_above_the_rate():
    now = [100.0]
    quota = ClientQuotas(None, default_producer_byte_rate=1000, window_s=5.0, clock=lambda: now[0])
    record = lambda client, n: quota.record("producer_byte_rate", "ANONYMOUS", client, n)  # noqa: E731
    assert record("a", 500) == 0
    throttle = record("a", 5000)  # 5.5 KB in the window's first second: 4.5 s over
    assert throttle == 4500
    assert record("b", 500) == 0  # a default quota is per client id
    now[0] += 10  # the window has passed
    assert record("a", 500) == 0
    assert ClientQuotas(None).record("producer_byte_rate", "u", "a", 10**9) == 0  # no quota

"""A long-polling Fetch wakes for what a group-commit round makes readable, even a round that ends before the
handler's coroutine first runs (the server starts it as a task, a turn of the event loop after the read that
found nothing). In-process, so that gap is made on purpose: the round is awaited between the handler's call
and the first step of what it returned. Each fetch asks to wait 30 s; it must answer long before that."""

import asyncio
import time
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from freshet.broker.config import BrokerConfig
from freshet.broker.context import RequestContext
from freshet.broker.handlers.fetch import fetch
from freshet.broker.handlers.share import share_fetch, share_group_heartbeat
from freshet.broker.server import Broker
from freshet.broker.wire.protocol import build, request_schema
from freshet.format.record_batch import TRANSACTIONAL_FLAG, encode_batch
from freshet.testing.raw_kafka import fetch_body

LONG_POLL_MS = 30_000
ANSWERED_WITHIN_S = 20  # well inside the long poll: a fetch nothing woke is still waiting then
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _run(tmp_path, scenario):
    async def main():
        broker = Broker(BrokerConfig(data_dir=str(tmp_path), host="127.0.0.1", port=0))
        await broker.start()
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


def _long_poll(broker, topic: str, offsets: dict[int, int], isolation: int, min_bytes: int = 1):
    body = fetch_body(topic, offsets, 1 << 20, 1 << 20, max_wait_ms=LONG_POLL_MS, min_bytes=min_bytes)
    body["isolation_level"] = isolation
    ctx = RequestContext(broker, SimpleNamespace(api_version=11, client_id="test"))
    pending = fetch(ctx, build(request_schema(1, 11), body))
    assert not isinstance(pending, dict), "nothing to read yet: the fetch should wait"
    return pending


async def _answer(pending) -> dict:
    """The fetch's answer, or a failure if it is still waiting when a woken one would long have answered."""
    try:
        return await asyncio.wait_for(pending, ANSWERED_WITHIN_S)
    except asyncio.TimeoutError:
        raise AssertionError(f"the long poll was not woken: still waiting after {ANSWERED_WITHIN_S} s "
                             f"of its {LONG_POLL_MS // 1000} s") from None


def _partitions(answer: dict) -> dict[int, dict]:
    parts = {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}
    for p in parts.values():
        assert p["error_code"] == ErrorCode.none
    return parts


def _size(entry: dict) -> int:
    records = entry["records"]
    size = len(records) if isinstance(records, bytes) else records.size
    if not isinstance(records, bytes):
        records.close()
    return size


async def _durable(broker, partition, result) -> None:
    broker.group_commit.written(partition)
    await broker.group_commit.durable(partition, result.last_offset)


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_a_write_made_durable_before_the_long_poll_first_runs_wakes_it(tmp_path):
    async def scenario(broker):
        partition = broker.registry.create("t", 1).partitions[0]
        pending = _long_poll(broker, "t", {0: 0}, READ_UNCOMMITTED)
        await _durable(broker, partition, partition.append(encode_batch([(b"k", b"v", _now_ms())])))
        entry = _partitions(await _answer(pending))[0]
        assert entry["high_watermark"] == 1 and _size(entry) > 0

    _run(tmp_path, scenario)


async def _open_transaction(broker, partition, transactional_id: str, value: bytes) -> tuple[int, int]:
    """A transaction of ``transactional_id`` holding one durable record in ``partition``; (producer id, epoch)."""
    coordinator = broker.transactions
    pid, epoch = await coordinator.init_producer_id(transactional_id, 60_000, -1, -1)
    added = await coordinator.add_partitions(transactional_id, pid, epoch, [("t", 0)], ErrorCode.producer_fenced)
    assert set(added.values()) == {ErrorCode.none}
    batch = encode_batch([(b"k", value, _now_ms())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                         attributes=TRANSACTIONAL_FLAG)
    await _durable(broker, partition, partition.append(batch))
    return pid, epoch


def test_a_commit_wakes_a_read_committed_long_poll(tmp_path):
    async def scenario(broker):
        partition = broker.registry.create("t", 1).partitions[0]
        pid, epoch = await _open_transaction(broker, partition, "tx", b"committed")
        assert (partition.last_stable_offset, partition.high_watermark) == (0, 1)
        pending = _long_poll(broker, "t", {0: 0}, READ_COMMITTED)
        # EndTxn: the COMMIT marker durable (the last stable offset moves past the record), then the
        # coordinator's own state; both rounds end before the fetch's coroutine first runs
        await broker.transactions.end_transaction("tx", pid, epoch, True, ErrorCode.producer_fenced)
        entry = _partitions(await _answer(pending))[0]
        assert entry["last_stable_offset"] == 2 and entry["aborted_transactions"] == []
        assert _size(entry) > 0

    _run(tmp_path, scenario)


def test_an_abort_wakes_a_read_committed_long_poll_and_names_the_aborted_transaction(tmp_path):
    async def scenario(broker):
        partition = broker.registry.create("t", 1).partitions[0]
        pid, epoch = await _open_transaction(broker, partition, "tx", b"aborted")
        pending = _long_poll(broker, "t", {0: 0}, READ_COMMITTED)
        await broker.transactions.end_transaction("tx", pid, epoch, False, ErrorCode.producer_fenced)
        entry = _partitions(await _answer(pending))[0]
        # the batches come back with the aborted range named, which the consumer skips
        assert entry["last_stable_offset"] == 2
        assert [(a["producer_id"], a["first_offset"]) for a in entry["aborted_transactions"]] == [(pid, 0)]
        assert _size(entry) > 0

    _run(tmp_path, scenario)


def test_a_long_poll_for_min_bytes_across_partitions_wakes_once_they_add_up(tmp_path):
    async def scenario(broker):
        topic = broker.registry.create("t", 2)
        batch = encode_batch([(b"k", b"x" * 200, _now_ms())])
        # more than one batch's bytes: one partition's record is not enough, both are
        pending = _long_poll(broker, "t", {0: 0, 1: 0}, READ_UNCOMMITTED, min_bytes=len(batch) + 1)
        for partition in topic.partitions:
            await _durable(broker, partition, partition.append(batch))
        parts = _partitions(await _answer(pending))
        assert sorted(parts) == [0, 1]
        assert _size(parts[0]) == _size(parts[1]) == len(batch)

    _run(tmp_path, scenario)


def test_a_write_made_durable_before_a_share_fetchs_long_poll_first_runs_wakes_it(tmp_path):
    async def scenario(broker):
        topic = broker.registry.create("t", 1)
        partition = topic.partitions[0]
        ctx = RequestContext(broker, SimpleNamespace(api_version=1, client_id="test"))
        joined = share_group_heartbeat(ctx, build(request_schema(76, 1), {
            "group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["t"]}))
        assert joined["error_code"] == ErrorCode.none
        pending = share_fetch(ctx, build(request_schema(78, 1), {
            "group_id": "g", "member_id": "m", "share_session_epoch": 0, "max_wait": LONG_POLL_MS, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
            "topics": [{"topic_id": topic.topic_id, "partitions": [{"partition_index": 0,
                                                                    "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []}))
        assert not isinstance(pending, dict), "nothing to read yet: the share fetch should wait"
        await _durable(broker, partition, partition.append(encode_batch([(b"k", b"v", _now_ms())])))
        entry = _partitions(await _answer(pending))[0]
        assert [(r["first_offset"], r["last_offset"]) for r in entry["acquired_records"]] == [(0, 0)]

    _run(tmp_path, scenario)

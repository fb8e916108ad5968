"""Review of session 22's broker-CPU work for issue 50: transaction timeouts on a Reaper (f122c97), group commit's
fsync thread (8b59efd), the kept answers of encode_response (51aedc3). Each test states what a user of Kafka
expects; an xfail (strict) one fails until the code does it. No timing assertions: a test waits on conditions,
and a "stuck" state is one from which nothing (no task, no timer) can move the transaction any more."""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import threading
import time
import tracemalloc
import uuid

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker import transactions as transactions_module
from freshet.broker.config import BrokerConfig
from freshet.broker.durability import GroupCommit
from freshet.broker.groups.consumer import UNREVOKED
from freshet.broker.server import Broker
from freshet.broker.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionError,
)
from freshet.broker.wire import protocol
from freshet.format.record_batch import encode_batch
from freshet.log import Partition, StorageError
from freshet.log.segment import Segment

from .broker.test_consumer_group_records import registry  # noqa: F401 (the fixture: orders, 4; payments, 2)
from .broker.test_protocol import _written_by_kio
from .broker.test_reaper import DEADLINE_S, _until
from .broker.test_review_transactions import run as run_as_cluster_coordinator
from .broker.test_transaction_timeouts import _open, run as _run

FENCED = ErrorCode.invalid_producer_epoch


def _recording_checks(txn) -> list[int]:
    """The wall-clock time (ms, the coordinator's clock) of every check of the timeouts' reaper from now on."""
    seen: list[int] = []
    check = txn._timeouts._check

    def recording(now: float):
        seen.append(transactions_module._now_ms())
        return check(now)

    txn._timeouts._check = recording
    return seen


def _settled(txn, tid: str, final: str) -> bool:
    """``tid`` reached ``final``, or is stuck: no abort or completion under way, the reaper not about to check and
    no timer of it set (nothing will ever change the transaction, until an unrelated request or a restart)."""
    if txn.transactions[tid].state == final:
        return True
    reaper = txn._timeouts
    return not txn._background and not txn._expiring and reaper._next == math.inf and not reaper._changed.is_set()


# -- f122c97: transaction.timeout.ms on deadlines -------------------------------------------------------------------


def test_later_add_partitions_and_add_offsets_do_not_push_the_timeout_back(tmp_path):
    """Kafka times a transaction from its first AddPartitions/AddOffsets (txnStartTimestamp): adding more later does
    not extend it, and the reaper still aborts it at the first one's deadline."""
    async def scenario(broker, txn):
        broker.registry.create("u", 2)
        pid, epoch = await _open(txn, "tx", 1500)  # ample: the adds come before it
        start = txn.transactions["tx"].start_ms
        await txn.add_partitions("tx", pid, epoch, [("u", 0)], FENCED)
        await txn.add_offsets("tx", pid, epoch, "g", FENCED)
        await txn.add_partitions("tx", pid, epoch, [("u", 1)], FENCED)
        assert txn.transactions["tx"].start_ms == start
        await _until(lambda: _settled(txn, "tx", COMPLETE_ABORT), "the abort at the first deadline")
        assert txn.transactions["tx"].state == COMPLETE_ABORT
        assert txn.transactions["tx"].producer_epoch == epoch + 1

    _run(tmp_path, scenario)


def test_a_transaction_ended_before_its_deadline_is_not_aborted_nor_is_the_next_one(tmp_path):
    """The reaper wakes at the first transaction's deadline (it was told of it): by then that transaction committed
    and the producer's next one (a minute's timeout) is open. Neither is touched."""
    async def scenario(broker, txn):
        pid, epoch = await txn.init_producer_id("tx", 1500, -1, -1)
        await txn.add_partitions("tx", pid, epoch, [("t", 0)], FENCED)
        first_deadline = txn.transactions["tx"].start_ms + 1500
        await txn.end_transaction("tx", pid, epoch, True, FENCED)
        checks = _recording_checks(txn)
        # the same producer re-inits with a long timeout (as a client restarting does), then opens its next one
        pid, epoch = await txn.init_producer_id("tx", 60_000, pid, epoch)
        await txn.add_partitions("tx", pid, epoch, [("t", 0)], FENCED)
        await _until(lambda: any(at > first_deadline for at in checks), "a check past the first deadline")
        meta = txn.transactions["tx"]
        assert (meta.state, meta.producer_epoch) == (ONGOING, epoch)
        await txn.end_transaction("tx", pid, epoch, True, FENCED)
        assert txn.transactions["tx"].state == COMPLETE_COMMIT

    _run(tmp_path, scenario)


def test_a_producer_that_reinits_while_a_timeout_is_pending_is_fenced_once(tmp_path):
    """InitProducerId over an open transaction aborts it (one epoch bump) and answers CONCURRENT_TRANSACTIONS; the
    retry gets the next epoch. The old transaction's deadline, still pending in the reaper, changes nothing then."""
    async def scenario(broker, txn):
        _, epoch = await _open(txn, "tx", 1500)  # ample: the re-init comes before it
        old_deadline = txn.transactions["tx"].start_ms + 1500
        checks = _recording_checks(txn)
        with pytest.raises(TransactionError) as concurrent:
            await txn.init_producer_id("tx", 60_000, -1, -1)
        assert concurrent.value.error_code == ErrorCode.concurrent_transactions
        await _until(lambda: txn.transactions["tx"].state == COMPLETE_ABORT, "the abort of the re-init")
        pid, new_epoch = await txn.init_producer_id("tx", 60_000, -1, -1)
        assert new_epoch == epoch + 2  # one bump by the abort, one by the InitProducerId
        await txn.add_partitions("tx", pid, new_epoch, [("t", 0)], FENCED)
        await _until(lambda: any(at > old_deadline for at in checks), "a check past the old deadline")
        meta = txn.transactions["tx"]
        assert (meta.state, meta.producer_epoch) == (ONGOING, new_epoch)

    _run(tmp_path, scenario)


def test_a_nearer_timeout_opened_later_wakes_the_reaper(tmp_path):
    """Transactions opened longest timeout first: each shorter one must move the reaper's wake-up earlier."""
    async def scenario(broker, txn):
        long_pid, long_epoch = await _open(txn, "long", 60_000)
        epochs = {tid: (await _open(txn, tid, ms))[1] for tid, ms in (("b", 900), ("c", 600), ("d", 300))}
        for tid in epochs:
            await _until(lambda tid=tid: _settled(txn, tid, COMPLETE_ABORT), f"{tid}'s abort")
            assert txn.transactions[tid].state == COMPLETE_ABORT
            assert txn.transactions[tid].producer_epoch == epochs[tid] + 1  # aborted once
        assert txn.transactions["long"].state == ONGOING
        await txn.end_transaction("long", long_pid, long_epoch, True, FENCED)

    _run(tmp_path, scenario)


def test_the_timeout_of_a_transaction_taken_over_comes_on_the_new_coordinator_only(tmp_path):
    """A cluster: a broker that stops leading __transaction_state leaves an open transaction alone (its check finds
    nothing to do), and the next leader (``follow``) aborts it at its timeout, counted from its start."""
    async def scenario(broker, state):
        txn = broker.transactions
        pid, epoch = await _open(txn, "tx", 300)
        deadline = txn.transactions["tx"].start_ms + 300
        checks = _recording_checks(txn)
        txn.follow(None)  # another broker leads __transaction_state now
        await _until(lambda: any(at > deadline for at in checks), "the old coordinator's check past the deadline")
        assert txn.transactions["tx"].state == ONGOING
        txn.follow(1)  # and this one again, in epoch 1: the transaction, replayed, is past its timeout
        await _until(lambda: _settled(txn, "tx", COMPLETE_ABORT), "the new coordinator's abort")
        assert txn.transactions["tx"].state == COMPLETE_ABORT
        assert txn.transactions["tx"].producer_epoch == epoch + 1

    run_as_cluster_coordinator(tmp_path, scenario)


def test_an_end_txn_refused_by_the_state_log_still_times_out(tmp_path):
    async def scenario(broker, txn):
        pid, epoch = await _open(txn, "tx", 1500)  # ample: the EndTxn comes before it
        write = txn._write

        async def refused_after_a_check(meta):
            if meta.state == PREPARE_COMMIT:  # the ISR wait: the reaper's check at the deadline comes meanwhile
                checks = txn._timeouts.checks
                await _until(lambda: txn._timeouts.checks > checks, "the reaper's check")
                raise TransactionError(ErrorCode.coordinator_not_available, "the ISR shrank (the test)")
            await write(meta)

        txn._write = refused_after_a_check
        with pytest.raises(TransactionError):
            await txn.end_transaction("tx", pid, epoch, True, FENCED)
        txn._write = write
        assert txn.transactions["tx"].state == ONGOING  # and its producer is gone: only the timeout ends it
        await _until(lambda: _settled(txn, "tx", COMPLETE_ABORT), "the timeout's abort or a stuck transaction")
        assert txn.transactions["tx"].state == COMPLETE_ABORT, "open for ever: the last stable offset is stuck"

    _run(tmp_path, scenario)


def test_a_refused_abort_at_restart_is_tried_again(tmp_path):
    async def main() -> None:
        config = BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1", port=0)
        first = Broker(config)
        await first.start()
        try:
            first.registry.create("t", 1)
            await _open(first.transactions, "tx", 1000)
        finally:
            await first.stop()  # a crash as far as the transaction goes: it is Ongoing in the state log
        broker = Broker(config)
        txn = broker.transactions
        write, refused = txn._write, []

        async def refusing_once(meta):
            if meta.state == PREPARE_ABORT and not refused:
                refused.append(meta.state)  # refused after the fsync's wait, as append_failure does: the
                await _until(lambda: txn._timeouts.checks >= 1, "the reaper's first check")  # reaper ran meanwhile
                raise TransactionError(ErrorCode.coordinator_not_available, "refused by the test")
            await write(meta)

        txn._write = refusing_once
        await broker.start()
        try:
            await _until(lambda: _settled(txn, "tx", COMPLETE_ABORT), "the abort, tried again, or a stuck one")
            assert refused and txn.transactions["tx"].state == COMPLETE_ABORT
        finally:
            await broker.stop()

    asyncio.run(main())


def test_a_wall_clock_step_back_between_check_and_abort_does_not_lose_the_timeout(tmp_path, monkeypatch):
    clock = {"offset_ms": 0}
    monkeypatch.setattr(transactions_module, "_now_ms", lambda: int(time.time() * 1000) + clock["offset_ms"])

    async def scenario(broker, txn):
        check = txn._timeouts._check

        def stepping_back(now: float):
            nearest = check(now)
            if txn._expiring:
                clock["offset_ms"] = -1000  # right after the check that found the timeout: the clock steps back 1 s
            return nearest

        txn._timeouts._check = stepping_back
        _, epoch = await _open(txn, "tx", 300)
        await _until(lambda: _settled(txn, "tx", COMPLETE_ABORT), "the abort a second later, or a stuck one")
        assert txn.transactions["tx"].state == COMPLETE_ABORT

    _run(tmp_path, scenario)


def test_a_timeout_abort_whose_marker_fsync_failed_is_completed(tmp_path):
    async def scenario(broker, txn):
        await _open(txn, "tx", 300)
        durable, failed = broker.group_commit.durable, []
        data = broker.registry.partition("t", 0)

        def failing_once(partition, offset):
            if partition is data and not failed:
                failed.append(offset)
                fut = asyncio.get_running_loop().create_future()
                fut.set_exception(StorageError("fsync failed; the write is not durable"))  # as _settle does
                return fut
            return durable(partition, offset)

        broker.group_commit.durable = failing_once
        await _until(lambda: failed and _settled(txn, "tx", COMPLETE_ABORT), "the abort completed, or stuck")
        assert txn.transactions["tx"].state == COMPLETE_ABORT

    _run(tmp_path, scenario)


# -- 8b59efd: group commit's fsync thread ---------------------------------------------------------------------------


def _write(partition: Partition, value: bytes = b"v") -> int:
    return partition.append(encode_batch([(b"k", value, 1)])).last_offset


def test_a_failed_fsync_fails_the_write_through_the_fsync_thread(tmp_path, monkeypatch):
    """A produce's acks=all waiter gets the fsync's error (the produce fails), the high watermark stays; a later
    round that succeeds acknowledges the next write."""
    flush, failures = Segment.flush, []

    def failing_once(self):
        if not failures:
            failures.append(self.path)
            raise StorageError(f"fsync of {self.path} failed: Input/output error")
        flush(self)

    monkeypatch.setattr(Segment, "flush", failing_once)

    async def main() -> None:
        commit = GroupCommit()
        commit.start()
        partition = Partition(str(tmp_path / "p"))
        try:
            offset = _write(partition)
            commit.written(partition)
            with pytest.raises(StorageError):
                await asyncio.wait_for(commit.durable(partition, offset), DEADLINE_S)
            assert partition.high_watermark == 0 and failures
            offset = _write(partition, b"w")
            commit.written(partition)
            await asyncio.wait_for(commit.durable(partition, offset), DEADLINE_S)
            assert partition.high_watermark == offset + 1
        finally:
            await commit.stop()
            partition.close()

    asyncio.run(main())


def _blocking_flush(monkeypatch) -> tuple[threading.Event, threading.Event, list]:
    """Segment.flush waits for ``release`` once it has ``entered``; ``done`` lists the fsyncs that finished."""
    flush, entered, release, done = Segment.flush, threading.Event(), threading.Event(), []

    def blocking(self):
        entered.set()
        assert release.wait(60)
        flush(self)
        done.append(self.path)

    monkeypatch.setattr(Segment, "flush", blocking)
    return entered, release, done


def test_stopping_with_a_round_in_flight_waits_for_its_fsync_and_acknowledges_nothing(tmp_path, monkeypatch):
    entered, release, done = _blocking_flush(monkeypatch)

    async def main() -> None:
        commit = GroupCommit()
        commit.start()
        partition = Partition(str(tmp_path / "p"))
        offset = _write(partition)
        commit.written(partition)
        waiter = commit.durable(partition, offset)
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 60)

        def release_once_stopping():  # the round's fsync ends while stop() is under way
            deadline = time.monotonic() + 60
            while not commit._task.done() and time.monotonic() < deadline:
                time.sleep(0.005)
            release.set()

        helper = threading.Thread(target=release_once_stopping)
        helper.start()
        await asyncio.wait_for(commit.stop(), DEADLINE_S)
        helper.join()
        assert not commit._thread.is_alive()
        assert done  # the fsync under way finished before stop returned
        assert not waiter.done() and partition.high_watermark == 0  # nothing acknowledged by a stopping broker
        partition.close()

    asyncio.run(main())


def test_a_loop_closed_with_a_round_in_flight_ends_the_fsync_thread_quietly(tmp_path, monkeypatch):
    entered, release, done = _blocking_flush(monkeypatch)
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    held = {}

    async def main() -> None:
        commit = held["commit"] = GroupCommit()
        commit.start()
        partition = held["partition"] = Partition(str(tmp_path / "p"))
        _write(partition)
        commit.written(partition)
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 60)
        # returns without stop(): asyncio.run cancels the group commit's task and closes the loop

    asyncio.run(main())
    release.set()
    held["commit"]._thread.join(60)
    assert not held["commit"]._thread.is_alive() and done and errors == []
    held["partition"].close()


def test_a_broker_that_fails_to_start_leaves_no_fsync_thread(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    before = set(threading.enumerate())

    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1",
                                     port=taken.getsockname()[1]))
        with pytest.raises(OSError):
            await broker.start()

    try:
        asyncio.run(main())
    finally:
        taken.close()
    left = [t for t in threading.enumerate() if t not in before and t.is_alive() and t.name == "fsync"]
    assert left == []


# -- 51aedc3: the kept answers of encode_response -------------------------------------------------------------------


@pytest.fixture
def kept(monkeypatch) -> dict:
    """encode_response's kept answers, empty for the test (and the module's own left as they were)."""
    fresh: dict = {}
    monkeypatch.setattr(protocol, "_ENCODED", fresh)
    return fresh


def _metadata(tag: int, partitions: int) -> dict:
    return {"throttle_time": 0, "cluster_id": "c", "controller_id": 0,
            "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
            "topics": [{"error_code": 0, "name": f"t{tag}", "topic_id": uuid.UUID(int=tag + 1), "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": k, "leader_id": 0, "leader_epoch": tag,
                                        "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}
                                       for k in range(partitions)]}]}


def test_flexible_and_plain_headers_carry_each_requests_correlation_id(kept):
    """ApiVersions v3 (flexible body, header v0 as Kafka), Metadata v12 (header v1: a tagged-fields byte) and
    Metadata v8 (header v0): the same body kept once, each frame kio's with its own correlation id."""
    api_versions = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
                    "throttle_time": 0}
    for api_key, version, body in ((18, 3, api_versions), (3, 12, _metadata(1, 3)), (3, 8, _metadata(1, 3))):
        for correlation_id in (5, -1, 2**31 - 1, 5):
            assert protocol.encode_response(api_key, version, correlation_id, body) == \
                _written_by_kio(api_key, version, correlation_id, body)
    assert len(kept) == 3


def test_a_body_changed_after_it_was_kept_is_written_anew(kept):
    """The key is a frozen copy: mutating the handler's dict afterwards (a partition added, an error set) must not
    find the old bytes."""
    body = _metadata(2, 2)
    first = protocol.encode_response(3, 12, 1, body)
    body["topics"][0]["partitions"].append({**body["topics"][0]["partitions"][0], "partition_index": 2})
    body["topics"][0]["error_code"] = ErrorCode.unknown_topic_or_partition
    assert protocol.encode_response(3, 12, 1, body) == _written_by_kio(3, 12, 1, body) != first


@pytest.mark.parametrize("left, right", [
    ({"throttle_time": 0, "error_code": ErrorCode.none}, {"throttle_time": 0, "error_code": 0}),
    ({"throttle_time": False, "error_code": 0}, {"throttle_time": 0, "error_code": 0}),
], ids=["error-code-enum-and-int", "bool-and-int"])
def test_equal_values_of_different_types_are_the_same_bytes(kept, left, right):
    assert protocol.encode_response(12, 4, 1, left) == _written_by_kio(12, 4, 1, left)
    assert protocol.encode_response(12, 4, 1, right) == _written_by_kio(12, 4, 1, right)


def test_the_kept_answers_stay_within_their_count_and_size(kept):
    for tag in range(300):
        protocol.encode_response(3, 12, 1, _metadata(tag, 1))
    protocol.encode_response(3, 12, 1, _metadata(1000, 2000))  # ~70 KiB: written, not kept
    assert len(kept) == protocol._ENCODED_MAX
    assert max(len(v) for v in kept.values()) <= protocol._ENCODED_MAX_BYTES


def test_the_kept_answers_memory_is_near_their_encoded_size(kept):
    protocol.encode_response(3, 12, 1, _metadata(-1, 1))  # the schema's writer and plan made before measuring
    kept.clear()
    gc.collect()
    tracemalloc.start()
    try:
        for tag in range(8):
            protocol.encode_response(3, 12, 1, _metadata(tag, 600))  # each just under 16 KiB encoded
        gc.collect()
        # what encode_response allocated and still holds (other threads' allocations are not counted)
        held = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(True, protocol.__file__),))
        retained = sum(stat.size for stat in held.statistics("filename"))
    finally:
        tracemalloc.stop()
    encoded = sum(len(v) for v in kept.values())  # none kept is a fix too: then nearly nothing may stay
    assert retained <= 2 * encoded + (64 << 10), f"{retained} bytes kept for {len(kept)} answers, {encoded} encoded"


def test_a_negative_zero_float_is_not_taken_for_zero(kept):
    def quotas(value: float) -> dict:
        return {"throttle_time": 0, "error_code": 0, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "u"}],
             "values": [{"key": "producer_byte_rate", "value": value}]}]}

    assert protocol.encode_response(48, 1, 1, quotas(0.0)) == _written_by_kio(48, 1, 1, quotas(0.0))
    assert protocol.encode_response(48, 1, 1, quotas(-0.0)) == _written_by_kio(48, 1, 1, quotas(-0.0))


# -- ed2c3f0: the KIP-848 group store writes only what changed -------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_walks_of_a_consumer_group_write_what_a_whole_encoding_finds_changed(registry, seed):
    """Joins (dynamic, static, by regex), heartbeats owning what they were given or stale, subscription and rack
    changes, static leaves and returns, leaves, expiries and fenced revocations, topics made, grown, deleted and made
    again: every write the store makes is checked by ``Checked`` (the whole group encoded again and diffed)."""
    import random

    from freshet.broker.groups.consumer import ConsumerGroupError

    from .broker.test_consumer_group_store_changes import Checked

    rng = random.Random(seed)
    c = Checked(registry)
    subscriptions = [("orders",), ("payments",), ("orders", "payments"), ("orders", "refunds")]
    made = {"orders": 4, "payments": 2}
    static: dict[str, int] = {}  # instance id -> how many times it came back
    serial = 0

    def group():
        return c.coordinator.groups.get("g")

    for _ in range(150):
        g = group()
        members = sorted(g.members.values(), key=lambda m: m.member_id) if g else []
        live = [m for m in members if m.epoch >= 0]
        op = rng.random()
        try:
            if op < 0.2 or not live:
                serial += 1
                instance = f"s-{serial}" if rng.random() < 0.3 else None
                if instance:
                    static[instance] = 0
                regex = "ref.*" if rng.random() < 0.2 else None
                c.beat(f"m-{serial}", 0, topics=rng.choice(subscriptions), regex=regex, instance_id=instance)
            elif op < 0.6:
                m = rng.choice(live)
                owned = m.assigned if rng.random() < 0.85 else {}
                topics = rng.choice(subscriptions) if rng.random() < 0.1 else None
                rack = rng.choice(["a", "b"]) if rng.random() < 0.1 else None
                c.beat(m.member_id, m.epoch, topics=topics, owned=owned, rack_id=rack, instance_id=m.instance_id)
            elif op < 0.68:
                m = rng.choice(live)
                c.beat(m.member_id, -2 if m.instance_id else -1, instance_id=m.instance_id)
            elif op < 0.74:
                gone = [m for m in members if m.epoch == -2]
                if gone:
                    m = rng.choice(gone)
                    static[m.instance_id] += 1
                    c.beat(f"{m.member_id}-back{static[m.instance_id]}", 0, topics=m.subscribed_names or ("orders",),
                           instance_id=m.instance_id)
            elif op < 0.8:
                m = rng.choice(members)
                if m.state == UNREVOKED and rng.random() < 0.5:
                    m.revocation_deadline -= 3600
                else:
                    m.last_seen -= 3600
                c.expire()
            elif op < 0.86:
                name = rng.choice(["orders", "payments", "refunds"])
                if name not in made:
                    made[name] = rng.randint(1, 3)
                    registry.create(name, made[name])
                elif rng.random() < 0.5:
                    made[name] += 1
                    registry.add_partitions(name, made[name])
                else:  # made again under a new id
                    registry.delete(name)
                    registry.create(name, made[name])
        except ConsumerGroupError:
            c.checked()  # refused (a fenced epoch, an unknown member): nothing changed; the store's checks held
    if group() is not None:  # the static members away keep their partitions until their session ends: it does
        for m in group().members.values():
            m.last_seen -= 3600 * (m.epoch == -2)
        c.expire()
        if group().members:
            c.settle()
    assert c.writes > 20
    assert cr_read(c) == c.reference.get("g", {})



def test_a_static_member_that_returns_while_revoking_finishes_its_revocation(registry):
    c, group = _static_group(registry)
    c.beat("m-2", 0, topics=("orders", "payments"))
    m1 = group.members["m-1"]
    c.beat("m-1", m1.epoch, owned=m1.assigned, instance_id="s-1")
    assert m1.state == UNREVOKED and m1.pending_revocation  # told to give some up to m-2
    c.beat("m-1", -2, instance_id="s-1")  # away (a restart) before it revoked
    c.beat("m-1b", 0, topics=("orders", "payments"), instance_id="s-1")  # back, owning nothing
    group = c.settle()
    assert group.members["m-1b"].pending_revocation == {}
    _each_partition_owned_once(group)


def test_a_static_member_that_returns_after_the_target_moved_reconciles(registry):
    c, group = _static_group(registry)
    c.beat("m-1", -2, instance_id="s-1")  # away (a restart), its partitions kept for it
    c.beat("m-2", 0, topics=("orders", "payments"))  # the target gives m-2 half of them meanwhile
    assert group.target["m-2"] and group.members["m-2"].assigned == {}
    c.beat("m-1b", 0, topics=("orders", "payments"), instance_id="s-1")  # back, owning nothing yet
    group = c.settle()
    _each_partition_owned_once(group)
    assert group.members["m-2"].assigned == group.target["m-2"]

def _static_group(registry):
    """A checked store's coordinator with group g: static member m-1 (instance s-1) holding orders and payments."""
    from .broker.test_consumer_group_store_changes import Checked

    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders", "payments"), instance_id="s-1")
    return c, c.settle()


def _each_partition_owned_once(group) -> None:
    owned = [(t, p) for m in group.members.values() for t, ps in m.assigned.items() for p in ps]
    assert sorted(owned) == sorted({*(("orders", p) for p in range(4)), *(("payments", p) for p in range(2))})


def cr_read(c) -> dict:
    from freshet.broker.groups import consumer_records

    return consumer_records.read(c.log).get("g", {})

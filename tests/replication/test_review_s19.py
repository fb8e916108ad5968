"""Review of the broker/cluster work of session 19 (issue #46): manual replica assignments, the controllers'
Raft secret, the share coordinator (keys 83-87, replicated ``__share_group_state``), the failed-append mapping.
Each test states Kafka's behaviour and fails (xfail strict) until the code does it; unit-level where possible."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.cluster.share_persister import SharePersister, acknowledged
from freshet.broker.config import BrokerConfig
from freshet.broker.context import RequestContext
from freshet.broker.groups.offsets import append_failure
from freshet.broker.groups.share_state import ShareStateStore, StateError, from_batches
from freshet.broker.handlers.share import share_group_heartbeat
from freshet.broker.replication import ReplicationError
from freshet.broker.server import Broker
from freshet.broker.transactions import TransactionCoordinator, TransactionError
from freshet.broker.wire.protocol import build, request_schema
from freshet.client.admin import TopicAdmin
from freshet.client.errors import ClientError
from freshet.controller.auth import read_password_file
from freshet.controller.node import Controller, parse_voters
from freshet.local import free_port
from freshet.log import StorageError
from freshet.testing.cli import freshet
from freshet.testing.raw_kafka import RawConnection

TOPIC_ID = str(uuid.uuid4())
ACKNOWLEDGED = 2


def _write(store: ShareStateStore, leader_epoch: int, state_epoch: int, start: int = 0) -> None:
    """A WriteShareGroupState of g/t-0 taken by ``store`` (appended and applied, as the coordinator does)."""
    store.apply([store.write("g", "t", TOPIC_ID, 0, leader_epoch, state_epoch,
                             from_batches(start, [(start, start + 1, ACKNOWLEDGED, 1)]))])


def _refusal(call) -> ErrorCode | None:
    try:
        call()
    except StateError as exc:
        return exc.error_code
    return None


# -- the share coordinator's fencing ---------------------------------------------------------------------------
def test_a_write_without_a_state_epoch_keeps_the_stored_one_and_still_fences_older_ones():
    store = ShareStateStore()
    _write(store, leader_epoch=1, state_epoch=5)
    _write(store, leader_epoch=1, state_epoch=-1)  # Kafka: newStateEpoch = the current one when -1
    assert store.get_partition("g", "t", TOPIC_ID, 0)["state_epoch"] == 5
    assert _refusal(lambda: store.write("g", "t", TOPIC_ID, 0, 1, 3, from_batches(0, []))) \
        == ErrorCode.fenced_state_epoch


def test_a_write_with_start_offset_minus_one_keeps_the_stored_start_offset():
    store = ShareStateStore()
    _write(store, leader_epoch=1, state_epoch=1, start=7)
    store.apply([store.write("g", "t", TOPIC_ID, 0, 1, 1, from_batches(-1, []))])
    assert store.get_partition("g", "t", TOPIC_ID, 0)["start_offset"] == 7


def test_a_new_leaders_read_fences_the_deposed_leader_at_the_next_share_coordinator_too(tmp_path):
    async def scenario() -> ErrorCode | None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path), host="127.0.0.1", port=0))
        await broker.start()
        try:
            coordinator = broker.share_groups
            coordinator._append([coordinator.store.write("g", "t", TOPIC_ID, 0, 5, 0, from_batches(0, []))])
            coordinator.store.read("g", "t", TOPIC_ID, 0, 6)  # the partition's new leader (epoch 6) loads it
            assert _refusal(lambda: coordinator.store.write("g", "t", TOPIC_ID, 0, 5, 0, from_batches(0, []))) \
                == ErrorCode.fenced_leader_epoch  # this coordinator fences the deposed leader
            successor = ShareStateStore()  # the coordinator moves: what follow() loads from the replicated log
            successor.load(coordinator.state, coordinator.state.log_end_offset)
            return _refusal(lambda: successor.write("g", "t", TOPIC_ID, 0, 5, 0, from_batches(0, [])))
        finally:
            await broker.stop()

    assert asyncio.run(scenario()) == ErrorCode.fenced_leader_epoch


def test_a_window_written_after_its_state_was_deleted_is_fenced_at_this_and_the_next_coordinator():
    """DeleteShareGroupState leaves a marker in a newer state epoch (Kafka refuses a write to a share-partition
    nobody initialized since): a leader's window of before the delete, written after it, is FENCED_STATE_EPOCH
    instead of stored again; a read answers no window in the marker's epoch, and a fresh start written in it is
    taken."""
    store = ShareStateStore()
    _write(store, leader_epoch=1, state_epoch=0, start=3)
    store.apply([store.delete("g", "t", 0)])
    assert store.delete("g", "t", 0) is None  # deleted already: nothing more to write
    stale = from_batches(3, [(3, 4, ACKNOWLEDGED, 1)])
    assert _refusal(lambda: store.write("g", "t", TOPIC_ID, 0, 1, 0, stale)) == ErrorCode.fenced_state_epoch
    assert _refusal(lambda: store.write("g", "t", TOPIC_ID, 0, 1, -1, stale)) == ErrorCode.fenced_state_epoch
    successor = ShareStateStore()  # the next share coordinator, from the topic's records
    successor.apply(list(store.values.items()))
    assert _refusal(lambda: successor.write("g", "t", TOPIC_ID, 0, 2, 0, stale)) == ErrorCode.fenced_state_epoch
    read = successor.read("g", "t", TOPIC_ID, 0, 2)
    assert (read["start_offset"], read["state_epoch"]) == (-1, 1)
    successor.apply([successor.write("g", "t", TOPIC_ID, 0, 2, 1, from_batches(10, []))])  # a fresh start
    value = successor.get_partition("g", "t", TOPIC_ID, 0)
    assert (value["start_offset"], value["state_epoch"], value.get("deleted")) == (10, 1, None)


def test_delete_share_group_state_fences_a_window_of_before_it_over_the_wire(broker, topic_name):
    from freshet.testing.topics import create_topic

    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        [tid] = [t.topic_id for t in conn.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                                            "allow_auto_topic_creation": False,
                                                            "include_topic_authorized_operations": False}).topics]

        def write(state_epoch: int) -> ErrorCode:
            r = conn.request(85, 1, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [{
                "partition": 0, "state_epoch": state_epoch, "leader_epoch": 0, "start_offset": 3,
                "delivery_complete_count": -1, "state_batches": [
                    {"first_offset": 3, "last_offset": 4, "delivery_state": ACKNOWLEDGED, "delivery_count": 1}]}]}]})
            return r.results[0].partitions[0].error_code

        def read() -> tuple:
            r = conn.request(84, 0, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
                {"partition": 0, "leader_epoch": 0}]}]})
            p = r.results[0].partitions[0]
            return p.error_code, p.state_epoch, p.start_offset, len(p.state_batches)

        assert write(0) == ErrorCode.none
        deleted = conn.request(86, 0, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0}]}]})
        assert deleted.results[0].partitions[0].error_code == ErrorCode.none
        assert write(0) == ErrorCode.fenced_state_epoch  # before: stored again
        assert read() == (ErrorCode.none, 1, -1, 0)
        assert write(1) == ErrorCode.none
        assert read() == (ErrorCode.none, 1, 3, 1)


# -- the failed-append mapping ---------------------------------------------------------------------------------
def test_the_share_coordinators_failed_disk_write_answers_as_the_other_coordinators():
    class Leader:
        async def acknowledged(self, offset, timeout):
            raise StorageError("fsync of __share_group_state-0 failed: Input/output error")

    broker = SimpleNamespace(share_groups=SimpleNamespace(state=None),
                             replicas=SimpleNamespace(check=lambda topic, index: (None, Leader())))
    with pytest.raises(StateError) as failed:
        asyncio.run(acknowledged(broker, 5))
    assert failed.value.error_code == ErrorCode.not_coordinator


def test_a_share_coordinator_that_does_not_answer_gives_up_the_read_by_its_timeout():
    async def scenario() -> None:
        async def silent(reader, writer):  # accepts, reads, never answers: a paused broker
            while await reader.read(1 << 16):
                pass

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        broker = SimpleNamespace(
            share_groups=SimpleNamespace(coordinator_epoch=None),  # another broker is the share coordinator
            cluster=SimpleNamespace(node_id=1, coordinator=lambda topic: SimpleNamespace(host="127.0.0.1", port=port)),
            config=SimpleNamespace(security=SimpleNamespace(inter_broker_login=lambda: None)))
        persister = SharePersister(broker)
        try:
            with pytest.raises(StateError):  # the deadline is generous: the read was given 1 s
                await asyncio.wait_for(persister.read("g", "t", uuid.uuid4(), 0, 3, timeout_s=1.0), 20)
        finally:
            persister.close()
            server.close()

    asyncio.run(scenario())


def _in_process(tmp_path, scenario):
    """``scenario(broker)`` against a one-node broker in this event loop (as tests/unit/broker do)."""
    async def main():
        broker = Broker(BrokerConfig(data_dir=str(tmp_path), host="127.0.0.1", port=0))
        await broker.start()
        try:
            return await scenario(broker)
        finally:
            await broker.stop()

    return asyncio.run(main())


def _disk_full(*args, **kwargs):
    raise StorageError("write to 00000000000000000000.log failed: No space left on device")


def test_an_offset_commit_whose_append_fails_on_disk_answers_not_coordinator(tmp_path):
    async def scenario(broker):
        broker.registry.create("t", 1)
        broker.offsets.partition.append = _disk_full
        ctx = RequestContext(broker, SimpleNamespace(api_version=8, client_id="review"))
        answer = broker.apis[8][2](ctx, build(request_schema(8, 8), {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_leader_epoch": -1, "committed_metadata": None}]}]}))
        answer = answer if isinstance(answer, dict) else await answer
        return [p["error_code"] for t in answer["topics"] for p in t["partitions"]]

    assert _in_process(tmp_path, scenario) == [ErrorCode.not_coordinator]


def test_an_epoch_bump_whose_append_fails_on_disk_is_refused_and_forgotten(tmp_path):
    async def scenario(broker):
        txn = broker.transactions
        pid, epoch = await txn.init_producer_id("tx", 60_000, -1, -1)
        append = txn.partition.append
        txn.partition.append = _disk_full
        with pytest.raises(TransactionError) as refused:
            await txn.init_producer_id("tx", 60_000, pid, epoch)  # KIP-360: the producer bumps its own epoch
        assert refused.value.error_code == ErrorCode.not_coordinator
        txn.partition.append = append  # the disk is back: the retry bumps, and writes it
        assert await txn.init_producer_id("tx", 60_000, pid, epoch) == (pid, epoch + 1)
        assert TransactionCoordinator(broker).transactions["tx"].producer_epoch == epoch + 1

    _in_process(tmp_path, scenario)


def test_a_share_state_write_whose_append_fails_on_disk_answers_not_coordinator(tmp_path):
    async def scenario(broker):
        topic = broker.registry.create("t", 1)
        broker.share_groups.state.append = _disk_full
        ctx = RequestContext(broker, SimpleNamespace(api_version=1, client_id="review"))
        answer = broker.apis[85][2](ctx, build(request_schema(85, 1), {"group_id": "g", "topics": [{
            "topic_id": topic.topic_id, "partitions": [{
                "partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
                "state_batches": [{"first_offset": 0, "last_offset": 1, "delivery_state": ACKNOWLEDGED,
                                   "delivery_count": 1}]}]}]}))
        answer = answer if isinstance(answer, dict) else await answer
        return [p["error_code"] for t in answer["results"] for p in t["partitions"]]

    assert _in_process(tmp_path, scenario) == [ErrorCode.not_coordinator]


def test_one_wait_answers_a_coordinators_append_as_kafka_maps_it():
    """append_failure, the wait of the group, transaction and share coordinators: None once durable, else the code
    Kafka's coordinators answer for a failed append."""
    class Leader:
        def __init__(self, outcome):
            self.outcome = outcome

        async def acknowledged(self, offset, timeout):
            if self.outcome is not None:
                raise self.outcome

    def waited(leader) -> ErrorCode | None:
        broker = SimpleNamespace(replicas=SimpleNamespace(check=lambda topic, index: (None, leader)))
        return asyncio.run(append_failure(broker, "__consumer_offsets", None, 7, 1.0))

    assert waited(Leader(None)) is None
    assert waited(None) == ErrorCode.not_coordinator  # no longer the leader: nothing acknowledges it here
    assert waited(Leader(ReplicationError(ErrorCode.not_leader_or_follower, "lost"))) == ErrorCode.not_coordinator
    assert waited(Leader(StorageError("fsync failed"))) == ErrorCode.not_coordinator
    for failure in (ReplicationError(ErrorCode.request_timed_out, "slow ISR"),
                    ReplicationError(ErrorCode.not_enough_replicas_after_append, "ISR shrank"), RuntimeError("bug")):
        assert waited(Leader(failure)) == ErrorCode.coordinator_not_available


def test_the_three_coordinators_answer_a_failed_fsync_alike(tmp_path):
    """One node: an fsync of __consumer_offsets, __transaction_state or __share_group_state that fails refuses the
    write NOT_COORDINATOR at each coordinator (the wait they share)."""
    async def scenario(broker):
        topic = broker.registry.create("t", 1)
        txn = broker.transactions
        pid, epoch = await txn.init_producer_id("tx", 60_000, -1, -1)

        def failing(partition, offset):
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(StorageError("fsync failed: Input/output error"))
            return fut

        broker.group_commit.durable = failing
        ctx = RequestContext(broker, SimpleNamespace(api_version=8, client_id="review"))
        committed = await broker.apis[8][2](ctx, build(request_schema(8, 8), {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_leader_epoch": -1, "committed_metadata": None}]}]}))
        with pytest.raises(TransactionError) as refused:
            await txn.init_producer_id("tx", 60_000, pid, epoch)
        ctx = RequestContext(broker, SimpleNamespace(api_version=1, client_id="review"))
        written = await broker.apis[85][2](ctx, build(request_schema(85, 1), {"group_id": "g", "topics": [{
            "topic_id": topic.topic_id, "partitions": [{
                "partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
                "state_batches": [{"first_offset": 0, "last_offset": 1, "delivery_state": ACKNOWLEDGED,
                                   "delivery_count": 1}]}]}]}))
        return ([p["error_code"] for t in committed["topics"] for p in t["partitions"]], refused.value.error_code,
                [p["error_code"] for t in written["results"] for p in t["partitions"]])

    assert _in_process(tmp_path, scenario) == ([ErrorCode.not_coordinator], ErrorCode.not_coordinator,
                                               [ErrorCode.not_coordinator])


# -- manual replica assignments --------------------------------------------------------------------------------
def test_a_broker_id_past_int32_in_a_replica_assignment_is_refused_not_wrapped(broker, topic_name):
    typed = 1 << 32  # wraps to 0: the shared broker's node id
    created = freshet(broker, "topic", "create", topic_name, "--replica-assignment", str(typed))
    assert created.returncode == 1, created.stdout
    assert str(typed) in created.stderr
    assert freshet(broker, "topic", "describe", topic_name).returncode == 1  # nothing created


def test_topic_admin_refuses_a_broker_id_past_int32_too(broker, topic_name):
    admin = TopicAdmin(broker.bootstrap)
    with pytest.raises(ClientError, match="4294967296"):
        admin.create_topic(topic_name, replica_assignment=[[1 << 32]])
    assert topic_name not in admin.list_topics()  # nothing created


def test_a_share_group_whose_state_delete_fails_is_not_deleted(tmp_path):
    async def scenario(broker):
        topic = broker.registry.create("t", 1)
        ctx = RequestContext(broker, SimpleNamespace(api_version=1, client_id="review"))
        for epoch in (0, -1):  # joins, then leaves: an empty share group
            assert share_group_heartbeat(ctx, build(request_schema(76, 1), {
                "group_id": "g", "member_id": "m", "member_epoch": epoch, "rack_id": None,
                "subscribed_topic_names": ["t"]}))["error_code"] == ErrorCode.none

        async def unavailable(group_id, partitions):
            raise StateError(ErrorCode.coordinator_not_available, "no share coordinator yet")

        broker.cluster = SimpleNamespace(  # as the group coordinator of a cluster sees it
            coordinates=lambda: True,
            view=SimpleNamespace(topics={"t": SimpleNamespace(topic_id=topic.topic_id, partitions=[0])}))
        broker.share_groups.persister = SimpleNamespace(delete=unavailable)
        try:
            ctx = RequestContext(broker, SimpleNamespace(api_version=2, client_id="review"))
            answer = broker.apis[42][2](ctx, build(request_schema(42, 2), {"groups_names": ["g"]}))
            answer = answer if isinstance(answer, dict) else await answer
        finally:
            broker.cluster = None
        assert [r["error_code"] for r in answer["results"]] == [ErrorCode.coordinator_not_available]
        return "g" in broker.share_groups.groups  # kept: a retry deletes it and its state

    assert _in_process(tmp_path, scenario)


# -- FindCoordinator key type 2 ---------------------------------------------------------------------------------
def test_a_share_key_below_find_coordinator_v6_is_an_invalid_request(broker):
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.request(10, 5, {"key_type": 2, "coordinator_keys": [f"g:{uuid.uuid4()}:0"]})
    assert answer.coordinators[0].error_code == ErrorCode.invalid_request


# -- the controllers' secret -----------------------------------------------------------------------------------
def test_a_password_file_other_users_can_read_is_refused(tmp_path):
    path = tmp_path / "controller.password"
    path.write_text("a-secret-of-the-cluster-long-enough\n")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="(?i)permission|readable|0600|mode"):
        read_password_file(str(path))


def test_a_controller_given_another_secret_says_so(caplog):
    caplog.set_level(logging.WARNING)
    voters = parse_voters(",".join(f"{i}@127.0.0.1:{free_port()}" for i in (1, 2)))
    controllers = [Controller(node, voters, listen=("127.0.0.1", free_port()), password=secret,
                              command_timeout_s=3.0).start()
                   for node, secret in ((1, "the-cluster-secret-0123456789"), (2, "a-mistyped-secret-0123456789"))]
    try:
        end = time.monotonic() + 30  # each dials the other every second (connectionRetryTime)
        said = False
        while not said and time.monotonic() < end:
            said = any(r.levelno >= logging.WARNING and any(w in r.getMessage().lower() for w in ("secret", "password"))
                       for r in caplog.records)
            time.sleep(0.2)
        assert said, "no warning that a peer's traffic does not decrypt with this controller's secret"
    finally:
        for controller in controllers:
            controller.stop()

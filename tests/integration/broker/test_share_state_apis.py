"""The share coordinator's APIs (KIP-932, keys 83-87: Initialize/Read/Write/DeleteShareGroupState,
ReadShareGroupStateSummary) and FindCoordinator key type 2, which a cluster's share-partition leaders send to the
leader of ``__share_group_state``; a one-node broker answers them as its own share coordinator. Bad input gets
Kafka's error codes and changes nothing stored."""

import uuid

from kio.schema.errors import ErrorCode

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

from .test_share_bad_input import topic_id

INITIALIZE, READ, WRITE, DELETE, SUMMARY, FIND_COORDINATOR = 83, 84, 85, 86, 87, 10
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4


def write(conn, group, tid, start, batches, leader_epoch=0, state_epoch=0, partition=0):
    r = conn.request(WRITE, 1, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [{
        "partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
        "delivery_complete_count": -1,
        "state_batches": [{"first_offset": f, "last_offset": t, "delivery_state": s, "delivery_count": c}
                          for f, t, s, c in batches]}]}]})
    return r.results[0].partitions[0]


def read(conn, group, tid, leader_epoch=0, partition=0):
    r = conn.request(READ, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "leader_epoch": leader_epoch}]}]})
    p = r.results[0].partitions[0]
    return p.error_code, p.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                          for b in p.state_batches]


def test_written_state_is_read_back_and_summarised(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic_name)
        assert read(conn, "g", tid) == (ErrorCode.none, -1, [])  # never written: the leader starts it
        batches = [(5, 6, ACKNOWLEDGED, 1), (7, 7, ACQUIRED, 2), (8, 9, AVAILABLE, 1)]
        assert write(conn, "g", tid, 5, batches).error_code == ErrorCode.none
        assert read(conn, "g", tid) == (ErrorCode.none, 5, batches)
        summary = conn.request(SUMMARY, 1, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]}).results[0].partitions[0]
        assert (summary.error_code, summary.start_offset, summary.state_epoch) == (ErrorCode.none, 5, 0)


def test_bad_writes_are_refused_and_change_nothing(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic_name)
        good = [(0, 3, ACKNOWLEDGED, 1)]
        assert write(conn, "g", tid, 0, good, leader_epoch=2).error_code == ErrorCode.none
        for bad in ([(0, 3, ACKNOWLEDGED, 1), (3, 4, AVAILABLE, 1)],  # overlapping
                    [(4, 2, AVAILABLE, 1)],  # last before first
                    [(0, 1, 3, 1)],  # no such delivery state
                    [(0, 1, AVAILABLE, -1)],  # a negative delivery count
                    [(0, 1 << 40, AVAILABLE, 1)]):  # a window no leader keeps
            assert write(conn, "g", tid, 0, bad, leader_epoch=2).error_code == ErrorCode.invalid_request, bad
        assert write(conn, "g", tid, -5, [], leader_epoch=2).error_code == ErrorCode.invalid_request
        assert write(conn, "g", tid, 9, [], leader_epoch=1).error_code == ErrorCode.fenced_leader_epoch
        assert write(conn, "g", uuid.uuid4(), 0, good).error_code == ErrorCode.unknown_topic_or_partition
        assert write(conn, "g", tid, 0, good, partition=7).error_code == ErrorCode.unknown_topic_or_partition
        assert write(conn, "", tid, 0, good).error_code == ErrorCode.invalid_request
        assert read(conn, "g", tid, leader_epoch=1)[0] == ErrorCode.fenced_leader_epoch
        assert read(conn, "g", tid, leader_epoch=2) == (ErrorCode.none, 0, good)  # as it was


def test_initialize_needs_a_newer_state_epoch_and_delete_forgets(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic_name)

        def initialize(state_epoch, start):
            r = conn.request(INITIALIZE, 0, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
                {"partition": 0, "state_epoch": state_epoch, "start_offset": start}]}]})
            return r.results[0].partitions[0].error_code

        assert write(conn, "g", tid, 0, [(0, 1, ACKNOWLEDGED, 1)], state_epoch=3).error_code == ErrorCode.none
        assert initialize(3, 10) == ErrorCode.fenced_state_epoch
        assert read(conn, "g", tid)[1] == 0
        assert initialize(4, 10) == ErrorCode.none
        assert read(conn, "g", tid) == (ErrorCode.none, 10, [])
        assert write(conn, "g", tid, 12, [], state_epoch=3).error_code == ErrorCode.fenced_state_epoch
        r = conn.request(DELETE, 0, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [{"partition": 0}]}]})
        assert r.results[0].partitions[0].error_code == ErrorCode.none
        assert read(conn, "g", tid) == (ErrorCode.none, -1, [])


def test_find_coordinator_for_share_keys(broker, topic_name):
    with RawConnection(broker.bootstrap) as conn:
        def find(version, key):
            r = conn.request(FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": [key]})
            return r.coordinators[0]

        found = find(6, f"g:{uuid.uuid4()}:0")
        assert (found.error_code, found.port) == (ErrorCode.none, broker.port)
        assert find(6, "g-without-partition").error_code == ErrorCode.invalid_request
        assert find(6, "g:topic:x").error_code == ErrorCode.invalid_request
        assert find(4, f"g:{uuid.uuid4()}:0").error_code == ErrorCode.invalid_request


def test_a_write_of_start_offset_and_state_epoch_minus_one_changes_only_the_batches_it_names(broker, topic_name):
    """Kafka's schema: -1 is 'not being written'; the stored start offset and state epoch stay."""
    create_topic(broker.bootstrap, topic_name, 1)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic_name)
        assert write(conn, "g", tid, 4, [(4, 6, ACQUIRED, 1)], state_epoch=2).error_code == ErrorCode.none
        assert write(conn, "g", tid, -1, [(5, 5, ACKNOWLEDGED, 1), (8, 8, ACQUIRED, 1)],
                     state_epoch=-1).error_code == ErrorCode.none
        assert read(conn, "g", tid) == (ErrorCode.none, 4, [(4, 4, ACQUIRED, 1), (5, 5, ACKNOWLEDGED, 1),
                                                            (6, 6, ACQUIRED, 1), (7, 7, AVAILABLE, 0),
                                                            (8, 8, ACQUIRED, 1)])
        assert write(conn, "g", tid, 4, [], state_epoch=1).error_code == ErrorCode.fenced_state_epoch  # still 2

"""Kafka 4's consumer group protocol (KIP-848) spoken raw: reconciliation step by step (revoke before
reassign, epochs), and requests no well-behaved client sends, answered with Kafka's error codes and
changing nothing."""

import uuid

import pytest
from kio.schema.errors import ErrorCode

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

HEARTBEAT, DESCRIBE = 68, 69


def topic_id(conn, topic):
    meta = conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    return meta.topics[0].topic_id


def heartbeat(conn, group, member, epoch, topics=None, owned=None, **extra):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000 if epoch == 0 else -1, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": owned if owned is not None else ([] if epoch == 0 else None)}
    body.update(extra)
    return conn.request(HEARTBEAT, 1, body)


def partitions(response, tid):
    assert response.assignment is not None
    return sorted(p for tp in response.assignment.topic_partitions if tp.topic_id == tid for p in tp.partitions)


def owned(tid, parts):
    return [{"topic_id": tid, "partitions": list(parts)}]


def describe(conn, group):
    return conn.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False}).groups[0]


@pytest.fixture
def setup(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 4)
    with RawConnection(broker.bootstrap) as conn:
        yield conn, topic_name, topic_id(conn, topic_name), "kip848-" + uuid.uuid4().hex[:8]


def test_a_partition_moves_only_after_its_owner_revoked_it(setup):
    conn, topic, tid, group = setup
    a = heartbeat(conn, group, "member-a", 0, [topic])
    assert a.error_code == 0 and a.member_epoch == 1 and partitions(a, tid) == [0, 1, 2, 3]
    assert a.heartbeat_interval.total_seconds() == 0.5  # the broker's setting (conftest)

    b = heartbeat(conn, group, "member-b", 0, [topic])
    assert b.member_epoch == 2
    assert partitions(b, tid) == []  # its share is still a's: nothing until a gives it up
    group_state = describe(conn, group)
    assert group_state.group_state == "Reconciling" and group_state.group_epoch == 2
    targets = {m.member_id: sorted(p for tp in m.target_assignment.topic_partitions for p in tp.partitions)
               for m in group_state.members}
    assert sorted(map(len, targets.values())) == [2, 2]

    # a is asked to revoke what b is to get; it stays at epoch 1 until it has
    a = heartbeat(conn, group, "member-a", 1, owned=owned(tid, [0, 1, 2, 3]))
    keep = partitions(a, tid)
    assert a.member_epoch == 1 and keep == targets["member-a"]
    # b's heartbeat meanwhile: still nothing, the partitions are a's
    b = heartbeat(conn, group, "member-b", 2, owned=owned(tid, []))
    assert b.member_epoch == 2 and (b.assignment is None or partitions(b, tid) == [])
    # a confirms the revocation: it moves to epoch 2, and b gets its partitions at its next heartbeat
    a = heartbeat(conn, group, "member-a", 1, owned=owned(tid, keep))
    assert a.error_code == 0 and a.member_epoch == 2
    b = heartbeat(conn, group, "member-b", 2, owned=owned(tid, []))
    assert partitions(b, tid) == targets["member-b"]
    b = heartbeat(conn, group, "member-b", 2, owned=owned(tid, targets["member-b"]))
    assert b.assignment is None  # nothing new to say
    assert describe(conn, group).group_state == "Stable"

    # a leaves: b gets everything at the next epoch at once (nobody owns a's partitions any more)
    left = heartbeat(conn, group, "member-a", -1)
    assert left.error_code == 0 and left.member_epoch == -1
    b = heartbeat(conn, group, "member-b", 2, owned=owned(tid, targets["member-b"]))
    assert b.member_epoch == 3 and partitions(b, tid) == [0, 1, 2, 3]


def test_epochs_are_checked(setup):
    conn, topic, tid, group = setup
    a = heartbeat(conn, group, "member-a", 0, [topic])
    heartbeat(conn, group, "member-b", 0, [topic])
    # an epoch the member never had is fenced; an unknown member is told so
    assert heartbeat(conn, group, "member-a", 7, owned=owned(tid, [])).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(conn, group, "nobody", 1).error_code == ErrorCode.unknown_member_id
    # an offset commit must carry the member's current epoch
    commit = {"group_id": group, "generation_id_or_member_epoch": 5, "member_id": "member-a",
              "group_instance_id": None, "retention_time": -1,
              "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    assert conn.request(8, 9, commit).topics[0].partitions[0].error_code == ErrorCode.stale_member_epoch
    assert conn.request(8, 9, {**commit, "member_id": "nobody"}).topics[0].partitions[0].error_code == \
        ErrorCode.unknown_member_id
    assert conn.request(8, 9, {**commit, "generation_id_or_member_epoch": a.member_epoch}) \
        .topics[0].partitions[0].error_code == 0
    # a classic member cannot join a consumer group with members, nor can it be deleted
    join = {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}], "reason": None}
    assert conn.request(11, 5, join).error_code == ErrorCode.inconsistent_group_protocol
    assert conn.request(42, 2, {"groups_names": [group]}).results[0].error_code == ErrorCode.non_empty_group
    # DescribeGroups is for classic groups; ConsumerGroupDescribe of a classic one is GROUP_ID_NOT_FOUND
    classic = conn.request(15, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
    assert classic.error_code == ErrorCode.group_id_not_found
    assert describe(conn, "no-such-group-" + group).error_code == ErrorCode.group_id_not_found
    listed = conn.request(16, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups
    assert [(g.group_id, g.group_type) for g in listed if g.group_id == group] == [(group, "consumer")]


@pytest.mark.parametrize("change, code", [
    ({"group_id": ""}, ErrorCode.invalid_group_id),
    ({"member_id": ""}, ErrorCode.invalid_request),
    ({"member_epoch": -3}, ErrorCode.invalid_request),
    ({"rebalance_timeout": -1}, ErrorCode.invalid_request),
    ({"subscribed_topic_names": None}, ErrorCode.invalid_request),
    ({"topic_partitions": None}, ErrorCode.invalid_request),
    ({"instance_id": ""}, ErrorCode.invalid_request),
    ({"server_assignor": "sticky-magic"}, ErrorCode.unsupported_assignor),
    ({"subscribed_topic_names": [], "subscribed_topic_regex": "events-(["}, ErrorCode.invalid_regular_expression),
])
def test_a_bad_join_is_refused_and_changes_nothing(setup, change, code):
    conn, topic, tid, group = setup
    a = heartbeat(conn, group, "member-a", 0, [topic])
    before = describe(conn, group)
    bad = heartbeat(conn, group, "member-x", 0, [topic], **change)
    assert bad.error_code == code and bad.error_message
    after = describe(conn, group)
    assert (after.group_epoch, [m.member_id for m in after.members]) == \
           (before.group_epoch, [m.member_id for m in before.members]) == (a.member_epoch, ["member-a"])


def test_a_static_member_returning_under_a_new_id_keeps_its_partitions(setup):
    conn, topic, tid, group = setup
    first = heartbeat(conn, group, "incarnation-1", 0, [topic], instance_id="static-1")
    assert partitions(first, tid) == [0, 1, 2, 3]
    # while it is in the group, another process with its instance id is refused
    clash = heartbeat(conn, group, "incarnation-2", 0, [topic], instance_id="static-1")
    assert clash.error_code == ErrorCode.unreleased_instance_id
    assert heartbeat(conn, group, "incarnation-1", -2, instance_id="static-1").member_epoch == -2
    back = heartbeat(conn, group, "incarnation-2", 0, [topic], instance_id="static-1")
    assert back.error_code == 0 and back.member_epoch == first.member_epoch  # no rebalance
    assert partitions(back, tid) == [0, 1, 2, 3]
    assert [m.member_id for m in describe(conn, group).members] == ["incarnation-2"]

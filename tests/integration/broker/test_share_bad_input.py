"""Share-group requests no well-behaved client sends, answered with Kafka's error codes, changing nothing;
and the admin side of share groups (ListGroups types, DescribeGroups, share-group offsets)."""

import time

import pytest
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import encode_batch
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

HEARTBEAT, DESCRIBE, FETCH, ACK = 76, 77, 78, 79
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
ACCEPT, RELEASE = 1, 2


def topic_id(conn, topic):
    meta = conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    return meta.topics[0].topic_id


def produce(conn, topic, count):
    batch = encode_batch([(None, b"v%d" % i, int(time.time() * 1000)) for i in range(count)])
    r = conn.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.none


def join(conn, group, member, topic):
    r = conn.request(HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                                    "subscribed_topic_names": [topic]})
    assert r.error_code == ErrorCode.none, r
    return r


def share_fetch(conn, group, member, epoch, tid, acks=(), max_records=100, forgotten=()):
    return conn.request(FETCH, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": l, "acknowledge_types": list(t)} for f, l, t in acks]}]}],
        "forgotten_topics_data": list(forgotten)})


def share_ack(conn, group, member, epoch, tid, acks):
    return conn.request(ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": l, "acknowledge_types": list(t)} for f, l, t in acks]}]}]})


def start_offset(conn, group, topic):
    r = conn.request(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [0]}]}]})
    return r.groups[0].topics[0].partitions[0].start_offset


@pytest.fixture
def queue(broker, topic_name):
    """A topic with 10 records; member "a" holds offsets 0-4 of share group G, member "b" holds 5-9."""
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"{topic_name}-g"
    with RawConnection(broker.bootstrap) as conn:
        r = conn.request(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}], "validate_only": False})
        assert r.responses[0].error_code == ErrorCode.none
        produce(conn, topic_name, 10)
        tid = topic_id(conn, topic_name)
        join(conn, group, "a", topic_name)
        join(conn, group, "b", topic_name)
        got_a = share_fetch(conn, group, "a", 0, tid, max_records=5)
        got_b = share_fetch(conn, group, "b", 0, tid, max_records=5)
        ranges = [(x.first_offset, x.last_offset, x.delivery_count)
                  for got in (got_a, got_b) for x in got.responses[0].partitions[0].acquired_records]
        assert ranges == [(0, 4, 1), (5, 9, 1)]
    return broker.bootstrap, group, topic_name, tid


@pytest.mark.parametrize("acks, code", [
    ([(0, 0, (ACCEPT,))], ErrorCode.invalid_record_state),  # b holds it, not a
    ([(5, 12, (ACCEPT,))], ErrorCode.invalid_record_state),  # past the records in flight
    ([(7, 5, (ACCEPT,))], ErrorCode.invalid_request),
    ([(5, 6, (ACCEPT, ACCEPT, ACCEPT))], ErrorCode.invalid_request),
    ([(5, 5, (7,))], ErrorCode.invalid_request),
])
def test_a_bad_acknowledgement_is_refused_and_changes_nothing(queue, acks, code):
    bootstrap, group, topic, tid = queue
    with RawConnection(bootstrap) as conn:
        r = share_ack(conn, group, "b", 1, tid, acks)
        assert r.error_code == ErrorCode.none
        assert r.responses[0].partitions[0].error_code == code
        assert start_offset(conn, group, topic) == 0
        # b's records are still b's: its good acknowledgement (next session epoch) goes through
        r = share_ack(conn, group, "b", 2, tid, [(5, 9, (ACCEPT,))])
        assert r.responses[0].partitions[0].error_code == ErrorCode.none
        r = share_ack(conn, group, "a", 1, tid, [(0, 4, (ACCEPT,))])
        assert r.responses[0].partitions[0].error_code == ErrorCode.none
        assert start_offset(conn, group, topic) == 10


def test_share_sessions_and_members_are_checked(queue):
    bootstrap, group, topic, tid = queue
    with RawConnection(bootstrap) as conn:
        assert share_ack(conn, group, "a", 7, tid, [(0, 0, (ACCEPT,))]).error_code == ErrorCode.invalid_share_session_epoch
        assert share_ack(conn, group, "a", 0, tid, [(0, 0, (ACCEPT,))]).error_code == ErrorCode.invalid_share_session_epoch
        assert share_ack(conn, group, "nobody", 1, tid, [(0, 0, (ACCEPT,))]).error_code == ErrorCode.unknown_member_id
        assert share_fetch(conn, "no-such-group", "a", 0, tid).error_code == ErrorCode.unknown_member_id
        # acknowledgements cannot ride on a session-opening fetch
        assert share_fetch(conn, group, "a", 0, tid, acks=[(0, 0, (ACCEPT,))]).error_code == ErrorCode.invalid_request
        # that refused request opened nothing: a's session epoch 1 still works
        assert share_fetch(conn, group, "a", 1, tid, acks=[(0, 4, (ACCEPT,))]).responses[0].partitions[0] \
            .acknowledge_error_code == 0
        # an unknown topic id is answered per partition
        r = share_fetch(conn, group, "a", 2, uuid_of(42))
        assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
        assert start_offset(conn, group, topic) == 5


def uuid_of(n):
    import uuid

    return uuid.UUID(int=n)


def test_heartbeats_with_bad_members_and_epochs(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"{topic_name}-g"
    with RawConnection(broker.bootstrap) as conn:
        def beat(member, epoch, topics=None, group_id=group):
            return conn.request(HEARTBEAT, 1, {"group_id": group_id, "member_id": member, "member_epoch": epoch,
                                               "rack_id": None, "subscribed_topic_names": topics})

        assert beat("", 0, [topic_name]).error_code == ErrorCode.invalid_request
        assert beat("m", 0, [topic_name], group_id="").error_code == ErrorCode.invalid_group_id
        assert beat("m", 0, None).error_code == ErrorCode.invalid_request  # joining needs a subscription
        assert beat("ghost", 3).error_code == ErrorCode.unknown_member_id
        joined = beat("m", 0, [topic_name])
        assert joined.error_code == ErrorCode.none and joined.member_epoch > 0
        assert [list(t.partitions) for t in joined.assignment.topic_partitions] == [[0]]
        assert beat("m", joined.member_epoch + 5).error_code == ErrorCode.fenced_member_epoch
        assert beat("m", joined.member_epoch).error_code == ErrorCode.none
        # a second member moves the group epoch; both are assigned the partition (members share partitions)
        other = beat("n", 0, [topic_name])
        assert [list(t.partitions) for t in other.assignment.topic_partitions] == [[0]]
        described = conn.request(DESCRIBE, 1, {"group_ids": [group, "nope"], "include_authorized_operations": False})
        assert [len(g.members) for g in described.groups] == [2, 0]
        assert described.groups[1].error_code == ErrorCode.group_id_not_found
        assert beat("m", -1).member_epoch == -1
        described = conn.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})
        assert [m.member_id for m in described.groups[0].members] == ["n"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_group_id_is_not_a_share_group(broker, topic_name, protocol):
    from confluent_kafka import Consumer

    create_topic(broker.bootstrap, topic_name, 1)
    group = f"{topic_name}-{protocol}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 3,
                  "group.protocol": protocol})
    c.subscribe([topic_name])
    c.poll(3)
    try:
        with RawConnection(broker.bootstrap) as conn:
            r = conn.request(HEARTBEAT, 1, {"group_id": group, "member_id": "m", "member_epoch": 0, "rack_id": None,
                                            "subscribed_topic_names": [topic_name]})
            assert r.error_code == ErrorCode.inconsistent_group_protocol
    finally:
        c.close()


def test_list_groups_reports_types_and_describe_groups_refers_share_groups_elsewhere(queue):
    bootstrap, group, topic, tid = queue
    with RawConnection(bootstrap) as conn:
        listed = conn.request(16, 5, {"states_filter": [], "types_filter": []})
        assert {g.group_id: (g.group_type, g.protocol_type) for g in listed.groups}[group] == ("share", "share")
        only_classic = conn.request(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert group not in {g.group_id for g in only_classic.groups}
        described = conn.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        assert described.groups[0].error_code == ErrorCode.group_id_not_found


def test_share_group_offsets_can_be_moved_only_while_the_group_is_empty(queue):
    bootstrap, group, topic, tid = queue
    with RawConnection(bootstrap) as conn:
        alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 8}]}]}
        assert conn.request(ALTER_OFFSETS, 0, alter).error_code == ErrorCode.non_empty_group
        assert start_offset(conn, group, topic) == 0
        for member in ("a", "b"):
            conn.request(HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": -1,
                                        "rack_id": None, "subscribed_topic_names": None})
        bad = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 99}, {"partition_index": 3, "start_offset": 0}]}]}
        r = conn.request(ALTER_OFFSETS, 0, bad)
        assert [p.error_code for p in r.responses[0].partitions] == [ErrorCode.invalid_request,
                                                                     ErrorCode.unknown_topic_or_partition]
        assert start_offset(conn, group, topic) == 0
        assert conn.request(ALTER_OFFSETS, 0, alter).responses[0].partitions[0].error_code == ErrorCode.none
        assert start_offset(conn, group, topic) == 8
        join(conn, group, "c", topic)
        got = share_fetch(conn, group, "c", 0, tid)
        assert [(x.first_offset, x.last_offset) for x in got.responses[0].partitions[0].acquired_records] == [(8, 9)]
        conn.request(HEARTBEAT, 1, {"group_id": group, "member_id": "c", "member_epoch": -1, "rack_id": None,
                                    "subscribed_topic_names": None})
        r = conn.request(DELETE_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert r.error_code == ErrorCode.none and r.responses[0].error_code == ErrorCode.none
        assert start_offset(conn, group, topic) == -1
        r = conn.request(42, 2, {"groups_names": [group]})
        assert r.results[0].error_code == ErrorCode.none
        listed = conn.request(16, 5, {"states_filter": [], "types_filter": []})
        assert group not in {g.group_id for g in listed.groups}


def test_a_topic_deleted_and_created_again_starts_its_queue_afresh(queue):
    bootstrap, group, topic, old_tid = queue
    with RawConnection(bootstrap) as conn:
        assert share_ack(conn, group, "a", 1, old_tid, [(0, 4, (ACCEPT,))]).responses[0].partitions[0].error_code == 0
        assert start_offset(conn, group, topic) == 5
        r = conn.request(20, 6, {"topics": [{"name": topic, "topic_id": None}], "timeout": 5000})
        assert r.responses[0].error_code == ErrorCode.none
        # the old topic id is gone: acknowledgements for it are answered per partition, nothing breaks
        r = share_ack(conn, group, "b", 1, old_tid, [(5, 9, (ACCEPT,))])
        assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
        create_topic(bootstrap, topic, 1)
        produce(conn, topic, 3)
        new_tid = topic_id(conn, topic)
        assert new_tid != old_tid
        assert start_offset(conn, group, topic) == -1  # the old window belonged to the old topic
        got = share_fetch(conn, group, "b", 2, new_tid)
        assert [(x.first_offset, x.last_offset, x.delivery_count)
                for x in got.responses[0].partitions[0].acquired_records] == [(0, 2, 1)]

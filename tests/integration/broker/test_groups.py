"""Consumer groups: load balancing, fan-out, failover, committed offsets, regex subscriptions."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client import consumer_config
from freshet.testing.polling import wait_for
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

HERE = os.path.dirname(__file__)


@pytest.fixture(params=["classic", "consumer"])
def group_protocol(request):
    """Each group test runs under the classic protocol and Kafka 4's (KIP-848, group.protocol=consumer)."""
    return request.param


def protocol_config(protocol: str, classic: dict | None = None) -> dict:
    """The client settings of a group protocol; ``classic`` holds those only the classic protocol takes
    (session timeout and heartbeat interval are the broker's under KIP-848)."""
    return {"group.protocol": "consumer"} if protocol == "consumer" else dict(classic or {})


def produce_range(bootstrap, topic, start, stop, partitions):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, stop):
        producer.produce(topic, b"%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def records_in(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(line.split()) for line in f if line[0].isdigit()]


def last_assignment(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = [line.split(" ", 1)[1].strip() for line in f if line.startswith("ASSIGNED")]
    return {int(p) for p in lines[-1].split(",") if p} if lines else None


def test_three_members_share_six_partitions_and_survive_kill_9(broker, topic_name, tmp_path, group_protocol):
    create_topic(broker.bootstrap, topic_name, 6)
    group = "g-" + uuid.uuid4().hex[:8]
    outs = [str(tmp_path / f"member{i}.txt") for i in range(3)]
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "group_member.py"), broker.bootstrap, topic_name,
                               group, out, group_protocol]) for out in outs]
    try:
        wait_for(lambda: all(last_assignment(o) is not None for o in outs)
                 and sum(len(last_assignment(o)) for o in outs) == 6, what="three members assigned")
        produce_range(broker.bootstrap, topic_name, 0, 6000, 6)
        wait_for(lambda: sum(len(records_in(o)) for o in outs) >= 6000, what="first 6000 records")
        assignments = [last_assignment(o) for o in outs]
        assert sorted(p for a in assignments for p in a) == list(range(6))
        assert all(len(a) == 2 for a in assignments)  # whole partitions, evenly
        seen = [r for o in outs for r in records_in(o)]
        assert sorted(int(v) for _, _, v in seen) == list(range(6000))  # none twice, none missed

        victim = 0
        victim_partitions = assignments[victim]
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        produce_range(broker.bootstrap, topic_name, 6000, 12000, 6)
        survivors = outs[1:]
        wait_for(lambda: len({int(v) for o in survivors for _, _, v in records_in(o) if int(v) >= 6000}) >= 6000,
                 what="survivors to take over the killed member's partitions")
        taken_over = set().union(*(last_assignment(o) for o in survivors))
        assert taken_over == set(range(6))
        after = [int(v) for o in survivors for _, _, v in records_in(o) if int(v) >= 6000]
        assert sorted(after) == list(range(6000, 12000))
        # the killed member's partitions resumed from its committed offsets: nothing re-read
        everything = [int(v) for o in outs for _, _, v in records_in(o)]
        assert sorted(everything) == list(range(12000))
        assert any(int(p) in victim_partitions for o in survivors for p, _, v in records_in(o) if int(v) >= 6000)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)


def consume_group(bootstrap, topic, group, expected, extra=None):
    consumer = Consumer(consumer_config(bootstrap, group, {"enable.auto.commit": True, **(extra or {})}))
    consumer.subscribe([topic] if not topic.startswith("^") else [topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        got += [m for m in consumer.consume(1000, 0.5) if m.error() is None]
    return consumer, got


def test_two_groups_each_receive_every_record(broker, topic_name, group_protocol):
    """Two groups on one topic at once, one of each protocol: each gets every record."""
    create_topic(broker.bootstrap, topic_name, 3)
    produce_range(broker.bootstrap, topic_name, 0, 3000, 3)
    other = "classic" if group_protocol == "consumer" else "consumer"
    groups = {f"fan-a-{topic_name}": group_protocol, f"fan-b-{topic_name}": other}
    results = {}

    def run(group):
        consumer, got = consume_group(broker.bootstrap, topic_name, group, 3000, protocol_config(groups[group]))
        consumer.close()
        results[group] = sorted(int(m.value()) for m in got)

    threads = [threading.Thread(target=run, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert list(results.values()) == [list(range(3000))] * 2


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_assignors_split_partitions_between_members(broker, topic_name, strategy):
    create_topic(broker.bootstrap, topic_name, 4)
    group = f"assign-{strategy}-{uuid.uuid4().hex[:6]}"
    conf = consumer_config(broker.bootstrap, group, {"partition.assignment.strategy": strategy,
                                                     "heartbeat.interval.ms": 300})
    members = [Consumer(conf) for _ in range(2)]
    for m in members:
        m.subscribe([topic_name])

    def assigned():
        for m in members:
            m.poll(0.05)
        parts = [sorted(tp.partition for tp in m.assignment()) for m in members]
        return parts if sorted(p for ps in parts for p in ps) == [0, 1, 2, 3] and all(parts) else None

    wait_for(lambda: assigned() is not None, what=f"{strategy} assignment")
    parts = assigned()
    assert len(parts[0]) == len(parts[1]) == 2
    for m in members:
        m.close()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_server_side_assignors_split_partitions_between_members(broker, assignor):
    """KIP-848: the broker assigns. Two topics of 3 partitions, two members: uniform balances the six
    partitions 3 and 3; range gives each member the same contiguous range of each topic (co-partitioned
    topics joined by partition stay together): 0-1 of both to one, 2 of both to the other."""
    prefix = f"remote-{assignor}-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}-a", f"{prefix}-b"]
    for t in topics:
        create_topic(broker.bootstrap, t, 3)
    conf = consumer_config(broker.bootstrap, prefix, {"group.protocol": "consumer", "group.remote.assignor": assignor})
    members = [Consumer(conf) for _ in range(2)]
    for m in members:
        m.subscribe(topics)

    def assigned():
        for m in members:
            m.poll(0.05)
        parts = [sorted((tp.topic, tp.partition) for tp in m.assignment()) for m in members]
        every = sorted(tp for ps in parts for tp in ps)
        return parts if every == sorted((t, p) for t in topics for p in range(3)) and all(parts) else None

    wait_for(lambda: assigned() is not None, what=f"{assignor} assignment")
    parts = assigned()
    if assignor == "uniform":
        assert len(parts[0]) == len(parts[1]) == 3
    else:
        by_member = [{t: [p for topic, p in ps if topic == t] for t in topics} for ps in parts]
        assert sorted(m[topics[0]] for m in by_member) == [[0, 1], [2]]
        assert all(m[topics[0]] == m[topics[1]] for m in by_member)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    description = admin.describe_consumer_groups([prefix])[prefix].result(10)
    assert description.type.name == "CONSUMER" and description.state.name == "STABLE"
    assert sorted(len(m.assignment.topic_partitions) for m in description.members) == sorted(map(len, parts))
    for m in members:
        m.close()


def test_committed_offsets_survive_broker_restart(own_broker, topic_name, group_protocol):
    create_topic(own_broker.bootstrap, topic_name, 2)
    produce_range(own_broker.bootstrap, topic_name, 0, 100, 2)
    consumer, got = consume_group(own_broker.bootstrap, topic_name, "durable-group", 100,
                                  {"enable.auto.commit": False, **protocol_config(group_protocol)})
    consumer.commit(asynchronous=False)
    consumer.close()
    own_broker.restart()
    probe = Consumer(consumer_config(own_broker.bootstrap, "durable-group"))
    committed = probe.committed([TopicPartition(topic_name, p) for p in range(2)], timeout=10)
    probe.close()
    assert [tp.offset for tp in committed] == [50, 50]
    produce_range(own_broker.bootstrap, topic_name, 100, 110, 2)
    consumer, got = consume_group(own_broker.bootstrap, topic_name, "durable-group", 10,
                                  protocol_config(group_protocol))
    consumer.close()
    assert sorted(int(m.value()) for m in got) == list(range(100, 110))  # resumed, nothing re-read


def test_regex_subscription_picks_up_topics_created_later(broker, group_protocol):
    prefix = "events-" + uuid.uuid4().hex[:6]
    admin = create_topic(broker.bootstrap, f"{prefix}.a", 1)
    consumer = Consumer(consumer_config(broker.bootstrap, "regex-" + prefix,
                                        {"topic.metadata.refresh.interval.ms": 500,
                                         **protocol_config(group_protocol)}))
    consumer.subscribe([f"^{prefix}\\..*"])
    got = set()
    produce_range(broker.bootstrap, f"{prefix}.a", 0, 5, 1)
    wait_for(lambda: got.update(m.topic() for m in consumer.consume(100, 0.2) if m.error() is None)
             or f"{prefix}.a" in got, what="first topic")
    admin.create_topics([NewTopic(f"{prefix}.b", 1)])[f"{prefix}.b"].result(10)
    produce_range(broker.bootstrap, f"{prefix}.b", 0, 5, 1)
    wait_for(lambda: got.update(m.topic() for m in consumer.consume(100, 0.2) if m.error() is None)
             or f"{prefix}.b" in got, what="topic created after subscribing")
    consumer.close()


def test_static_member_is_described_with_its_instance_id(broker, topic_name, group_protocol):
    create_topic(broker.bootstrap, topic_name, 1)
    group = "static-" + uuid.uuid4().hex[:6]
    consumer = Consumer(consumer_config(broker.bootstrap, group, {"group.instance.id": "instance-1",
                                                                  **protocol_config(group_protocol)}))
    consumer.subscribe([topic_name])
    wait_for(lambda: consumer.poll(0.1) is None and bool(consumer.assignment()), what="static member assigned")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(10)
    assert [m.group_instance_id for m in description.members] == ["instance-1"]
    assert description.state.name == "STABLE"
    assert description.type.name == group_protocol.upper()
    consumer.close()


def test_admin_offsets_delete_group_and_delete_records(broker, topic_name):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    produce_range(broker.bootstrap, topic_name, 0, 100, 1)
    group = "admin-" + uuid.uuid4().hex[:6]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0, 42)])])[
        group].result(10)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert [(tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions] == [(topic_name, 0, 42)]
    assert group in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}

    result = admin.delete_records([TopicPartition(topic_name, 0, 30)])[TopicPartition(topic_name, 0, 30)].result(10)
    assert result.low_watermark == 30
    consumer = Consumer(consumer_config(broker.bootstrap))
    assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (30, 100)
    consumer.assign([TopicPartition(topic_name, 0, 10)])  # below the log start: auto.offset.reset applies
    first = None
    while first is None:
        first = next((m for m in consumer.consume(10, 1) if m.error() is None), None)
    assert first.offset() == 30
    consumer.close()


def test_group_protocol_errors(broker):
    group = "raw-" + uuid.uuid4().hex[:6]
    join = {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}], "reason": None}
    with RawConnection(broker.bootstrap) as conn:
        first = conn.request(11, 5, join)
        assert first.error_code == 79  # MEMBER_ID_REQUIRED
        joined = conn.request(11, 5, {**join, "member_id": first.member_id})
        assert joined.error_code == 0 and joined.leader == first.member_id and joined.generation_id == 1
        hb = {"group_id": group, "generation_id": 1, "member_id": "nobody", "group_instance_id": None}
        assert conn.request(12, 3, hb).error_code == 25  # UNKNOWN_MEMBER_ID
        assert conn.request(12, 3, {**hb, "member_id": first.member_id, "generation_id": 7}).error_code == 22
        sync = conn.request(14, 3, {"group_id": group, "generation_id": 1, "member_id": first.member_id,
                                    "group_instance_id": None,
                                    "assignments": [{"member_id": first.member_id, "assignment": b"abc"}]})
        assert sync.error_code == 0 and sync.assignment == b"abc"
        assert conn.request(12, 3, {**hb, "member_id": first.member_id}).error_code == 0
        commit = {"group_id": group, "generation_id_or_member_epoch": 9, "member_id": first.member_id,
                  "group_instance_id": None, "retention_time": -1,
                  "topics": [{"name": "__consumer_offsets", "partitions": [
                      {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                       "committed_metadata": ""}]}]}
        assert conn.request(8, 8, commit).topics[0].partitions[0].error_code == 22  # ILLEGAL_GENERATION
        standalone = {**commit, "generation_id_or_member_epoch": -1, "member_id": ""}
        assert conn.request(8, 8, standalone).topics[0].partitions[0].error_code == 25  # group is active
        deleted = conn.request(42, 2, {"groups_names": [group]})
        assert deleted.results[0].error_code == 68  # NON_EMPTY_GROUP
        left = conn.request(13, 3, {"group_id": group, "members": [{"member_id": first.member_id,
                                                                    "group_instance_id": None}]})
        assert left.error_code == 0 and left.members[0].error_code == 0
        assert conn.request(42, 2, {"groups_names": [group]}).results[0].error_code == 0
        assert conn.request(42, 2, {"groups_names": [group]}).results[0].error_code == 69  # GROUP_ID_NOT_FOUND


def test_offset_delete(broker, topic_name, group_protocol):
    admin = create_topic(broker.bootstrap, topic_name, 2)
    group = "odel-" + uuid.uuid4().hex[:6]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic_name, 0, 5), TopicPartition(topic_name, 1, 7)])])[group].result(10)
    with RawConnection(broker.bootstrap) as conn:
        response = conn.request(47, 0, {"group_id": group, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0}]}]})
        assert response.error_code == 0 and response.topics[0].partitions[0].error_code == 0
        missing = conn.request(47, 0, {"group_id": "no-such-group", "topics": []})
        assert missing.error_code == 69  # GROUP_ID_NOT_FOUND
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert [(tp.partition, tp.offset) for tp in listed.topic_partitions] == [(1, 7)]

    consumer = Consumer(consumer_config(broker.bootstrap, group, protocol_config(group_protocol)))
    missing = f"{topic_name}-missing"  # subscribed to, never created: Kafka answers the unknown topic first
    consumer.subscribe([topic_name, missing])
    wait_for(lambda: consumer.poll(0.1) is None and bool(consumer.assignment()), what="member assigned")
    with RawConnection(broker.bootstrap) as conn:
        response = conn.request(47, 0, {"group_id": group, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 1}]},
            {"name": missing, "partitions": [{"partition_index": 0}]}]})
        assert [t.partitions[0].error_code for t in response.topics] == [86, 3]  # GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION
    consumer.close()


def _commit_error(consumer, topic, offset):
    """What a synchronous commit of ``topic``-0 at ``offset`` answers: None, or the error's code."""
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def test_a_commit_from_outside_the_group_checks_the_topic_first(broker, topic_name, group_protocol):
    """librdkafka's test 0030: a consumer that never subscribed (member epoch / generation -1) commits for itself.
    Kafka accepts it while the group has no members, and answers an unknown topic as such whatever the group."""
    admin = create_topic(broker.bootstrap, topic_name, 1)
    group = "outside-" + uuid.uuid4().hex[:6]
    outside = Consumer(consumer_config(broker.bootstrap, group, protocol_config(group_protocol)))
    assert _commit_error(outside, "no-such-topic-" + uuid.uuid4().hex[:6], 123) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}  # nothing stored
    assert _commit_error(outside, topic_name, 5) is None
    assert outside.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset == 5

    member = Consumer(consumer_config(broker.bootstrap, group, protocol_config(group_protocol)))
    member.subscribe([topic_name])
    wait_for(lambda: member.poll(0.1) is None and bool(member.assignment()), what="member assigned")
    # the group has a member now: a commit from outside is refused and changes nothing; the topic still comes first
    assert _commit_error(outside, topic_name, 9) == KafkaError.UNKNOWN_MEMBER_ID
    assert _commit_error(outside, "no-such-topic", 9) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert member.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset == 5
    member.close()
    # empty again: the outside client may commit
    assert _commit_error(outside, topic_name, 11) is None
    assert outside.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset == 11
    outside.close()

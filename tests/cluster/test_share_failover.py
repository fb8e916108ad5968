"""Share groups' delivery state survives losing a broker (issue #46, KIP-932): ``__share_group_state`` is a
replicated internal topic whose leader is the share coordinator; a partition's leader (the share-partition leader)
persists its window there (WriteShareGroupState, answered once the coordinator's ISR has it) and reads it back
when it becomes the leader (ReadShareGroupState). Killed -9, neither the partition's leader nor the coordinator
takes acknowledged records with it: they are never delivered again, and every record not acknowledged is."""

import threading
import time

from confluent_kafka import AcknowledgeType, Consumer, ElectionType, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from freshet.local.cluster import LocalCluster
from freshet.testing.raw_kafka import RawConnection

from .conftest import DEADLINE, admin
from .test_metadata import created, wait_for

STATE = "__share_group_state"
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_GROUPS, READ_SUMMARY = 90, 91, 42, 87


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value.encode())
    assert producer.flush(DEADLINE) == 0


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    return consumer


def polled(consumer: ShareConsumer, at_least: int) -> list:
    """Poll (acknowledging nothing) until at least ``at_least`` records are held."""
    held: list = []

    def enough():
        held.extend(m for m in consumer.poll(1.0) if m.error() is None)
        return len(held) >= at_least

    wait_for(f"{at_least} records acquired", enough)
    return held


def accepted(consumer: ShareConsumer, msgs: list) -> set[str]:
    """ACCEPT ``msgs`` and wait for the answer: each partition's acknowledgement answered without error."""
    for m in msgs:
        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
    results = consumer.commit_sync(DEADLINE)
    assert results and all(error is None for error in results.values()), results
    return {m.value().decode() for m in msgs}


def drain(c: LocalCluster, group: str, topic: str, expected: set[str]) -> list[str]:
    """A fresh member accepts what it is given until ``expected`` has all come and the share coordinator's start
    offset of every partition reached its high watermark (``settled``: nothing left to deliver, again or at all);
    every delivery, in order."""
    consumer = share_consumer(c.bootstrap, group, topic)
    got: list[str] = []
    end = time.monotonic() + DEADLINE
    try:
        while not expected <= set(got) and time.monotonic() < end:
            msgs = [m for m in consumer.poll(1.0) if m.error() is None]
            if msgs:
                for m in msgs:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                consumer.commit_sync(DEADLINE)
                got.extend(m.value().decode() for m in msgs)
        wait_for(f"{group}'s start offsets of {topic} at its high watermarks", lambda: settled(c, group, topic))
        got.extend(m.value().decode() for m in consumer.poll(0) if m.error() is None)  # nothing more came
    finally:
        consumer.close()
    assert expected <= set(got), f"never delivered again: {sorted(expected - set(got))}; delivered {got}"
    return got


def settled(c: LocalCluster, group: str, topic: str) -> bool:
    """Every partition of ``topic`` holding records has ``group``'s start offset (DescribeShareGroupOffsets, from the
    share coordinator) at its high watermark: every record acknowledged, none the leader may deliver again."""
    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "settled-probe", "log_level": 0})
    try:
        partitions = probe.list_topics(topic, timeout=DEADLINE).topics[topic].partitions
        highs = {p: probe.get_watermark_offsets(TopicPartition(topic, p), DEADLINE)[1] for p in partitions}
        starts = {p.partition_index: p.start_offset for t in described_offsets(c, group).topics
                  if t.topic_name == topic for p in t.partitions}
    except (KafkaException, OSError):  # a broker just killed or restarted: ask again
        return False
    finally:
        probe.close()
    return all(starts.get(p, -1) >= high for p, high in highs.items() if high > 0)


def close_later(consumer: ShareConsumer) -> threading.Thread:
    """A consumer whose broker was killed closes in the background (its last requests wait for a timeout)."""
    thread = threading.Thread(target=consumer.close, daemon=True)
    thread.start()
    return thread


def test_acknowledged_records_stay_done_across_the_partition_leader_and_the_share_coordinator_killed(tmp_path):
    with LocalCluster(3, directory=str(tmp_path / "c"), broker_args=["--share-auto-offset-reset", "earliest"],
                      controller_args=["--auto-leader-rebalance-enable", "false"]) as c:
        created(admin(c.bootstrap), NewTopic("jobs", 1, 3))
        first = [f"job-{i}" for i in range(40)]
        produce(c.bootstrap, "jobs", first)

        # a member acquires records, accepts some; the rest stay acquired by it when the partition's leader dies
        a = share_consumer(c.bootstrap, "workers", "jobs")
        held = polled(a, 20)
        done = accepted(a, held[:10])
        state = c.wait_until(lambda m: c.partition(STATE, 0, m), DEADLINE, f"{STATE} created")
        assert len(state["replicas"]) == 3, state  # share.coordinator.state.topic.replication.factor
        leader = c.leader("jobs")
        c.kill(leader)
        closing = [close_later(a)]
        c.wait_until(lambda m: c.partition("jobs", 0, m)["leader"] not in (-1, leader), DEADLINE, "a new leader")

        got = drain(c, "workers", "jobs", set(first) - done)
        assert not done & set(got), "acknowledged records delivered again after the leader's failover"
        assert sorted(got) == sorted(set(first) - done), "a record lost or delivered twice"
        done |= set(got)
        c.restart(leader)
        c.wait_until(lambda m: leader in c.partition("jobs", 0, m)["isr"], DEADLINE, "the restarted broker in sync")
        # the partition's leadership back to its preferred replica, the coordinator's left where it is: the two
        # roles on two brokers (the leader balancing off, so that they stay there)
        client = admin(c.bootstrap)  # referenced while its future is pending
        elected = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition("jobs", 0)])
        assert all(e is None for e in elected.result(DEADLINE).values())
        partition_leader = c.wait_until(lambda m: c.partition("jobs", 0, m)["leader"] == leader and leader,
                                        DEADLINE, "the preferred leader back")
        coordinator = c.leader(STATE)
        assert coordinator not in (partition_leader, -1)

        # the share coordinator (the leader of __share_group_state) dies while a member holds records
        second = [f"job-{i}" for i in range(40, 80)]
        produce(c.bootstrap, "jobs", second)
        b = share_consumer(c.bootstrap, "workers", "jobs")
        held = polled(b, 20)
        done |= accepted(b, held[:10])
        c.kill(coordinator)
        c.wait_until(lambda m: c.partition(STATE, 0, m)["leader"] not in (-1, coordinator), DEADLINE,
                     "a new share coordinator")
        # the partition's leader lived on: the member's locks hold (another member gets none of its records) and
        # its acknowledgements go to the new coordinator
        other = share_consumer(c.bootstrap, "workers", "jobs")
        locked = {m.value().decode() for m in held}
        free = set(second) - locked - done

        def took_the_free_ones() -> bool:  # every record the member does not hold, and none it does
            nonlocal done
            got = [m for m in other.poll(1.0) if m.error() is None]
            assert not {m.value().decode() for m in got} & locked
            if got:
                done |= accepted(other, got)
            return free <= done
        try:
            wait_for("another member to take every record the first does not hold", took_the_free_ones)
        finally:
            other.close()
        done |= accepted(b, held[10:20])
        b.close()  # what it still holds comes back
        got = drain(c, "workers", "jobs", set(second) - done)
        assert not done & set(got), "acknowledged records delivered again after the coordinator's failover"
        assert sorted(got) == sorted(set(second) - done), "a record lost or delivered twice"

        # every broker describes the group's offsets from the share coordinator (ReadShareGroupStateSummary)
        for node in c.running_nodes():
            with RawConnection(c.bootstrap_of(node)) as conn:
                answer = conn.request(DESCRIBE_OFFSETS, 1, {"groups": [
                    {"group_id": "workers", "topics": None},
                    {"group_id": "workers", "topics": [{"topic_name": "jobs", "partitions": [0]},
                                                       {"topic_name": "no-such-topic", "partitions": [0]}]},
                    {"group_id": "nobody", "topics": None}]})
            every, named, nobody = answer.groups
            assert [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
                    for t in every.topics] == [("jobs", [(0, 80)])], node
            assert [(t.topic_name, [(p.start_offset, p.error_code) for p in t.partitions]) for t in named.topics] == [
                ("jobs", [(80, ErrorCode.none)]), ("no-such-topic", [(-1, ErrorCode.unknown_topic_or_partition)])]
            assert nobody.error_code == ErrorCode.group_id_not_found
        for thread in closing:
            thread.join(DEADLINE)

        c.restart(coordinator)
        offsets_reset_and_deleted_through_the_share_coordinator(c)


def described_offsets(c: LocalCluster, group: str):
    """DescribeShareGroupOffsets of every partition ``group`` has a start offset of, as the share coordinator holds
    them."""
    with RawConnection(c.bootstrap_of(c.leader(STATE))) as conn:
        return conn.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": group, "topics": None}]}).groups[0]


def offsets_reset_and_deleted_through_the_share_coordinator(c: LocalCluster) -> None:
    """AlterShareGroupOffsets and DeleteGroups on a cluster, as Kafka's group coordinator does them: through the
    share coordinator in a new state epoch (InitializeShareGroupState / DeleteShareGroupState), so that a partition's
    leader on another broker, still holding the group's old window, reads the new state when a member comes."""
    created(admin(c.bootstrap), NewTopic("tasks", 3, 3))
    share_coordinator = c.wait_until(lambda m: c.partition(STATE, 0, m)["leader"] not in (-1, None)
                                     and c.partition(STATE, 0, m)["leader"], DEADLINE, "a share coordinator")
    index = next(i for i in range(3) if c.leader("tasks", i) not in (-1, share_coordinator))
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    values = [f"task-{i}" for i in range(10)]
    for value in values:
        producer.produce("tasks", value.encode(), partition=index)
    assert producer.flush(DEADLINE) == 0
    # a topic without a replica on the group coordinator: its offset is taken as asked
    group_coordinator = c.leader("__consumer_offsets")
    elsewhere = next(n for n in c.running_nodes() if n != group_coordinator)
    with RawConnection(c.bootstrap_of(group_coordinator)) as conn:  # confluent-kafka's NewTopic refuses a replica assignment alone
        made = conn.request(19, 5, {"topics": [{"name": "solo", "num_partitions": -1, "replication_factor": -1,
                                                "assignments": [{"partition_index": 0, "broker_ids": [elsewhere]}],
                                                "configs": []}], "timeout": 60000, "validate_only": False})
    assert made.topics[0].error_code == ErrorCode.none, made
    c.wait_until(lambda m: (c.partition("solo", 0, m) or {}).get("leader") == elsewhere, DEADLINE, "solo led")
    produce(c.bootstrap, "solo", [f"solo-{i}" for i in range(6)])
    alter = {"group_id": "resetters", "topics": [
        {"topic_name": "tasks", "partitions": [{"partition_index": index, "start_offset": 3}]},
        {"topic_name": "solo", "partitions": [{"partition_index": 0, "start_offset": 5}]}]}

    def to_group_coordinator(api_key: int, version: int, body: dict):
        with RawConnection(c.bootstrap_of(c.leader("__consumer_offsets"))) as conn:
            return conn.request(api_key, version, body)

    a = share_consumer(c.bootstrap, "resetters", "tasks")
    try:
        assert accepted(a, polled(a, 10)) == set(values)  # the leader's window starts at 10 now
        assert to_group_coordinator(ALTER_OFFSETS, 0, alter).error_code == ErrorCode.non_empty_group
    finally:
        a.close()
    with RawConnection(c.bootstrap_of(elsewhere)) as conn:  # only the group coordinator changes a group's offsets
        assert conn.request(ALTER_OFFSETS, 0, alter).error_code == ErrorCode.not_coordinator
    answer = wait_for("the offsets reset", lambda: (r := to_group_coordinator(ALTER_OFFSETS, 0, alter)).error_code
                      != ErrorCode.non_empty_group and r)  # the member's leave reaches the coordinator
    assert answer.error_code == ErrorCode.none
    assert [t.partitions[0].error_code for t in answer.responses] == [ErrorCode.none] * 2
    described = described_offsets(c, "resetters")
    starts = {(t.topic_name, p.partition_index): p.start_offset for t in described.topics for p in t.partitions}
    assert (starts[("tasks", index)], starts[("solo", 0)]) == (3, 5), starts  # tasks' others: where they were

    # the partition's leader (not the share coordinator) held the window at 10: the new member reads it at 3
    got = drain(c, "resetters", "tasks", set(values[3:]))
    assert sorted(got) == values[3:], got

    deleted = wait_for("the group deleted", lambda: (r := to_group_coordinator(DELETE_GROUPS, 2, {
        "groups_names": ["resetters"]}).results[0]).error_code != ErrorCode.non_empty_group and r)
    assert deleted.error_code == ErrorCode.none
    with RawConnection(c.bootstrap_of(c.leader(STATE))) as conn:
        tid = conn.request(3, 12, {"topics": [{"name": "tasks", "topic_id": None}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False}).topics[0].topic_id
        summary = conn.request(READ_SUMMARY, 1, {"group_id": "resetters", "topics": [
            {"topic_id": tid, "partitions": [{"partition": i, "leader_epoch": -1} for i in range(3)]}]})
    assert [(p.error_code, p.start_offset) for p in summary.results[0].partitions] == [(ErrorCode.none, -1)] * 3
    assert not described_offsets(c, "resetters").topics  # solo's state gone too
    # on the leader too: a new member of the name starts afresh (the brokers' share.auto.offset.reset, earliest)
    got = drain(c, "resetters", "tasks", set(values))
    assert sorted(got) == values, got


def test_a_share_state_replication_factor_below_one_is_refused_in_one_line(tmp_path):
    from .test_cli import freshet

    bad = freshet("broker", "start", "--data-dir", str(tmp_path / "b"), "--share-state-topic-replication-factor", "0")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "error: --share-state-topic-replication-factor must be at least 1"
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())

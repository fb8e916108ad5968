"""Manual replica assignments (issue #46): CreateTopics and CreatePartitions with ``assignments`` (confluent-kafka's
``replica_assignment``, kafka-topics' ``--replica-assignment``) put each partition on the brokers given, the first
one leading; a bad one is answered with Kafka's code (INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST) and creates
nothing, validate_only included. A one-node broker takes assignments that name only itself."""

import pytest
from confluent_kafka.admin import NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from freshet.testing.cli import freshet
from freshet.testing.raw_kafka import RawConnection

from .conftest import admin
from .test_metadata import created, error_of, wait_for

INVALID_ASSIGNMENT = ("INVALID_REPLICA_ASSIGNMENT", ErrorCode.invalid_replica_assignment.value)


def placed(client, name: str) -> list[tuple[list[int], int, list[int]]]:
    """Each partition's (replicas, leader, sorted ISR) as a client's Metadata gives them."""
    md = client.list_topics(timeout=30)
    if name not in md.topics or md.topics[name].error is not None:
        return []
    parts = md.topics[name].partitions
    return [(list(parts[i].replicas), parts[i].leader, sorted(parts[i].isrs)) for i in sorted(parts)]


def controller_topics(cluster) -> dict:
    return {t["name"]: t for t in cluster.metadata()["topics"]}


def test_create_topics_puts_each_partition_on_the_brokers_given_the_first_leading(cluster):
    client = admin(cluster.bootstrap)
    given = [[1, 2], [2, 3], [3, 1], [3, 2]]
    futures = client.create_topics([NewTopic("assigned", len(given), replica_assignment=given)], validate_only=True)
    futures["assigned"].result(60)  # valid, and nothing created
    assert "assigned" not in controller_topics(cluster)
    created(client, NewTopic("assigned", len(given), replica_assignment=given))
    expected = [(r, r[0], sorted(r)) for r in given]
    for node_id in (1, 2, 3):  # every broker tells the same placement
        assert wait_for(f"the assignment through broker {node_id}",
                        lambda: placed(admin(cluster.bootstrap_of(node_id)), "assigned") == expected)
    assert [p["replicas"] for p in controller_topics(cluster)["assigned"]["partitions"]] == given

    # CreatePartitions with one replica list per new partition, the topic's replication factor
    new = [[2, 1], [1, 3]]
    client.create_partitions([NewPartitions("assigned", 6, replica_assignment=new)],
                             validate_only=True)["assigned"].result(60)
    assert len(controller_topics(cluster)["assigned"]["partitions"]) == 4
    client.create_partitions([NewPartitions("assigned", 6, replica_assignment=new)],
                             operation_timeout=60)["assigned"].result(60)
    expected += [(r, r[0], sorted(r)) for r in new]
    assert wait_for("the added partitions", lambda: placed(client, "assigned") == expected)


def raw_create(cluster, topic: dict, validate_only: bool):
    """CreateTopics v7 as sent, for what librdkafka refuses to send (both counts and assignments, partition
    indexes out of order): the topic's (error code, message)."""
    body = {"topics": [{"num_partitions": -1, "replication_factor": -1, "configs": [], **topic}],
            "timeout": 60000, "validate_only": validate_only}
    with RawConnection(cluster.bootstrap_of(1), timeout=90) as conn:
        answer = conn.request(19, 7, body).topics[0]
    return answer.error_code, answer.error_message


def pairs(*replicas, first: int = 0) -> list[dict]:
    return [{"partition_index": i, "broker_ids": list(r)} for i, r in enumerate(replicas, first)]


@pytest.mark.parametrize("validate_only", [False, True])
def test_bad_create_topics_assignments_are_refused_with_kafkas_codes_and_create_nothing(cluster, validate_only):
    before = controller_topics(cluster)
    bad = [  # (topic fields, code, words of the message)
        ({"assignments": pairs([1, 9])}, ErrorCode.invalid_replica_assignment, "broker 9, which is not registered"),
        ({"assignments": pairs([1, 2], [2, 2])}, ErrorCode.invalid_replica_assignment, "names broker 2 more than"),
        ({"assignments": pairs([1, 2], [3])}, ErrorCode.invalid_replica_assignment, "partition 1 has 1 replica"),
        ({"assignments": pairs([1, 2], [], [2, 3])}, ErrorCode.invalid_replica_assignment, "empty replica list"),
        ({"assignments": pairs([1, 2], [2, 3], first=1)}, ErrorCode.invalid_replica_assignment, "consecutive"),
        ({"assignments": pairs([1, 2]) + pairs([2, 3])}, ErrorCode.invalid_replica_assignment, "more than once"),
        ({"assignments": pairs([1, 2]), "num_partitions": 1}, ErrorCode.invalid_request, "give either"),
        ({"assignments": pairs([1, 2]), "replication_factor": 2}, ErrorCode.invalid_request, "give either"),
    ]
    for index, (fields, code, words) in enumerate(bad):
        name = f"bad-assignment-{validate_only}-{index}"
        error_code, message = raw_create(cluster, {"name": name, **fields}, validate_only)
        assert (error_code, words in (message or "")) == (code, True), (fields, error_code, message)
    assert controller_topics(cluster) == before

    client = admin(cluster.bootstrap)  # as confluent-kafka sends them
    futures = client.create_topics([NewTopic("bad-assignment-client", 2, replica_assignment=[[1, 2], [2, 7]])],
                                   validate_only=validate_only)
    assert error_of(futures["bad-assignment-client"]) == INVALID_ASSIGNMENT
    assert controller_topics(cluster) == before


@pytest.mark.parametrize("validate_only", [False, True])
def test_bad_create_partitions_assignments_are_refused_and_add_nothing(cluster, validate_only):
    client = admin(cluster.bootstrap)
    name = f"grows-{validate_only}"
    created(client, NewTopic(name, 2, 2))
    before = controller_topics(cluster)
    bad = [
        (4, [[1, 2]]),  # one assignment for two new partitions
        (3, [[1, 2, 3]]),  # 3 replicas, the topic's factor is 2
        (3, [[1, 8]]),  # an unknown broker
        (3, [[3, 3]]),  # a broker twice
    ]
    for count, assignment in bad:
        futures = client.create_partitions([NewPartitions(name, count, replica_assignment=assignment)],
                                           validate_only=validate_only, operation_timeout=60)
        assert error_of(futures[name]) == INVALID_ASSIGNMENT, (count, assignment)
    assert controller_topics(cluster) == before


def test_the_cli_takes_kafka_topics_replica_assignment_and_refuses_bad_input_in_one_line(cluster):
    done = freshet(cluster, "topic", "create", "cli-assigned", "--replica-assignment", "3:1,1:2,2:3")
    assert done.returncode == 0, done.stderr
    assert "created topic cli-assigned with 3 partitions" in done.stdout
    expected = [([3, 1], 3, [1, 3]), ([1, 2], 1, [1, 2]), ([2, 3], 2, [2, 3])]
    assert wait_for("the CLI's assignment", lambda: placed(admin(cluster.bootstrap), "cli-assigned") == expected)
    for args, words in [
        (("--replica-assignment", "1:x"), "partition 0 is '1:x'"),
        (("--replica-assignment", "1:2,,2:3"), "partition 1 is ''"),
        (("--replica-assignment", "1:2", "--partitions", "1"), "cannot be used with --partitions"),
        (("--replica-assignment", "1:9"), "broker 9, which is not registered"),
        (("--replica-assignment", "1:2,3"), "partition 1 has 1 replica"),
    ]:
        done = freshet(cluster, "topic", "create", "cli-refused", *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, (args, done.stderr)
    assert "cli-refused" not in controller_topics(cluster)

    done = freshet(cluster, "topic", "add-partitions", "cli-assigned", "--total", "5",
                   "--replica-assignment", "2:1,3:2")
    assert done.returncode == 0, done.stderr
    expected += [([2, 1], 2, [1, 2]), ([3, 2], 3, [2, 3])]
    assert wait_for("the added partitions", lambda: placed(admin(cluster.bootstrap), "cli-assigned") == expected)
    for args, words in [(("--total", "6", "--replica-assignment", "1:2:3"), "partition 5 has 3 replica"),
                        (("--total", "7", "--replica-assignment", "1:2"), "2 partition(s) are added"),
                        (("--total", "6", "--replica-assignment", "1:z"), "partition 0 is '1:z'")]:
        done = freshet(cluster, "topic", "add-partitions", "cli-assigned", *args)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert words in done.stderr, (args, done.stderr)
    assert len(controller_topics(cluster)["cli-assigned"]["partitions"]) == 5
    assert freshet(cluster, "topic", "create", "cli-plain").returncode == 0  # without an assignment, as before
    done = freshet(cluster, "topic", "add-partitions", "cli-plain", "--total", "2")
    assert done.returncode == 0 and "now has 2 partitions" in done.stdout, done.stderr


def test_an_assignment_naming_a_stopped_broker_is_taken_beside_a_live_one(cluster):
    """As KRaft: the stopped (fenced) broker's replica starts outside the ISR and joins it once the broker is back;
    a partition whose brokers are all stopped is refused. Runs last in the module: it stops broker 3 and starts it
    again."""
    client = admin(cluster.bootstrap_of(1))
    cluster.stop_broker(3)
    try:
        assert wait_for("broker 3 fenced", lambda: 3 not in client.list_topics(timeout=30).brokers)
        error_code, message = raw_create(cluster, {"name": "all-on-a-stopped-broker",
                                                   "assignments": pairs([3], [1])}, False)
        assert error_code == ErrorCode.invalid_replica_assignment, message
        assert "[3]" in message and "all-on-a-stopped-broker" not in controller_topics(cluster)
        created(client, NewTopic("on-a-stopped-broker", 2, replica_assignment=[[1, 3], [2, 1]]))
        assert wait_for("the topic without broker 3 in its ISR", lambda: placed(client, "on-a-stopped-broker") == [
            ([1, 3], 1, [1]), ([2, 1], 2, [1, 2])])
    finally:
        cluster.restart(3)
    assert wait_for("broker 3 in the ISR", lambda: placed(client, "on-a-stopped-broker") == [
        ([1, 3], 1, [1, 3]), ([2, 1], 2, [1, 2])])


def test_a_one_node_broker_takes_assignments_naming_only_itself(broker, topic_name):
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    me = client.list_topics(timeout=30).controller_id
    created(client, NewTopic(topic_name, 2, replica_assignment=[[me], [me]]))
    assert placed(client, topic_name) == [([me], me, [me])] * 2
    futures = client.create_topics([NewTopic(f"{topic_name}-x", 1, replica_assignment=[[me, me + 1]])])
    assert error_of(futures[f"{topic_name}-x"]) == INVALID_ASSIGNMENT
    futures = client.create_topics([NewTopic(f"{topic_name}-x", 2, replica_assignment=[[me], [me, me]])])
    assert error_of(futures[f"{topic_name}-x"]) == INVALID_ASSIGNMENT
    assert f"{topic_name}-x" not in client.list_topics(timeout=30).topics
    futures = client.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[me + 1]])])
    assert error_of(futures[topic_name]) == INVALID_ASSIGNMENT
    futures = client.create_partitions([NewPartitions(topic_name, 4, replica_assignment=[[me]])])
    assert error_of(futures[topic_name]) == INVALID_ASSIGNMENT  # two added, one assignment
    assert len(placed(client, topic_name)) == 2
    client.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[me]])])[topic_name].result(60)
    assert len(placed(client, topic_name)) == 3


def test_the_group_coordinator_takes_offsets_of_topics_it_holds_no_replica_of(cluster):
    """Offsets are the group coordinator's to keep wherever the partitions live, as Kafka's: OffsetCommit,
    OffsetDelete and TxnOffsetCommit of topics with their one replica on the other brokers succeed (librdkafka's
    test 0081 saw UNKNOWN_TOPIC_OR_PARTITION for its replication factor 1 topics)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    client = admin(cluster.bootstrap)
    group = "elsewhere-offsets-group"

    def find_coordinator():
        with RawConnection(cluster.bootstrap_of(1), timeout=90) as conn:
            found = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        return found.node_id if found.error_code == ErrorCode.none else None

    coordinator = wait_for("the group coordinator", find_coordinator)
    names = [f"elsewhere-offsets-{b}" for b in (1, 2, 3) if b != coordinator]
    created(client, *(NewTopic(n, 1, replica_assignment=[[int(n[-1])]]) for n in names))
    for name in names:
        assert wait_for(f"{name} through the coordinator",
                        lambda: len(placed(admin(cluster.bootstrap_of(coordinator)), name)) == 1)
    partitions = [TopicPartition(n, 0) for n in names]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 0})
    try:
        done = consumer.commit(offsets=[TopicPartition(n, 0, 5) for n in names], asynchronous=False)
        assert [(p.topic, p.error) for p in done] == [(n, None) for n in names]
        assert [(p.topic, p.offset) for p in consumer.committed(partitions, timeout=60)] == [(n, 5) for n in names]

        with RawConnection(cluster.bootstrap_of(coordinator), timeout=90) as conn:  # no confluent-kafka call
            deleted = conn.request(47, 0, {"group_id": group, "topics": [
                {"name": n, "partitions": [{"partition_index": 0}]} for n in names]})
        assert [(t.name, t.partitions[0].error_code) for t in deleted.topics] == [(n, ErrorCode.none) for n in names]
        assert [p.offset for p in consumer.committed(partitions, timeout=60)] == [-1001] * len(names)  # none left

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "elsewhere-offsets-txn",
                             "log_level": 0})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(n, 0, 9) for n in names],
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        assert [p.offset for p in consumer.committed(partitions, timeout=60)] == [9] * len(names)
    finally:
        consumer.close()


def test_a_consumer_protocol_group_is_assigned_topics_its_coordinator_holds_no_replica_of(cluster):
    """A KIP-848 coordinator assigns from the cluster's metadata, as Kafka's reads the metadata image: a
    ``group.protocol=consumer`` member subscribed (by name, then by regex) to topics whose every replica is on the
    other brokers gets all their partitions and reads every record (it was assigned nothing, every heartbeat)."""
    from confluent_kafka import Consumer, Producer

    client = admin(cluster.bootstrap)
    groups = {"elsewhere-848-names": None, "elsewhere-848-regex": None}

    def find_coordinator(group):
        with RawConnection(cluster.bootstrap_of(1), timeout=90) as conn:
            found = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        return found.node_id if found.error_code == ErrorCode.none else None

    for group in groups:
        groups[group] = wait_for(f"the coordinator of {group}", lambda: find_coordinator(group))
    topics = {}
    for group, coordinator in groups.items():  # each group's topic on the two brokers that do not coordinate it
        elsewhere = [b for b in (1, 2, 3) if b != coordinator]
        name = f"{group}-topic"
        topics[group] = name
        created(client, NewTopic(name, 3, replica_assignment=[[elsewhere[0]], [elsewhere[1]], [elsewhere[0]]]))
        assert wait_for(f"{name} through the coordinator",
                        lambda: len(placed(admin(cluster.bootstrap_of(coordinator)), name)) == 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    sent = {}
    for name in topics.values():
        for p in range(3):
            for i in range(4):
                value = f"{name}-{p}-{i}".encode()
                producer.produce(name, value, partition=p)
                sent.setdefault(name, set()).add(value)
    assert producer.flush(60) == 0

    for group, name in topics.items():
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "log_level": 0})
        try:
            consumer.subscribe([name] if group.endswith("names") else [f"^{group}-t.*"])
            got = set()

            def read_all():
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    got.add(message.value())
                return got == sent[name]

            assert wait_for(f"every record of {name}", read_all)
            assert sorted((p.topic, p.partition) for p in consumer.assignment()) == [(name, p) for p in range(3)]
        finally:
            consumer.close()


def test_a_share_group_is_assigned_topics_its_coordinator_holds_no_replica_of(cluster):
    """A KIP-932 share coordinator assigns from the cluster's metadata too: a share consumer subscribed to a topic
    whose every replica is on the other brokers gets all its partitions (ShareGroupHeartbeat, ShareGroupDescribe) and
    reads every record from their leaders (it was assigned nothing, every heartbeat)."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

    from freshet.client.queue import set_group_configs

    group = "elsewhere-share"

    def find_coordinator():
        with RawConnection(cluster.bootstrap_of(1), timeout=90) as conn:
            found = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        return found.node_id if found.error_code == ErrorCode.none else None

    coordinator = wait_for(f"the coordinator of {group}", find_coordinator)
    elsewhere = [b for b in (1, 2, 3) if b != coordinator]
    name = f"{group}-topic"
    created(admin(cluster.bootstrap), NewTopic(name, 3, replica_assignment=[[elsewhere[0]], [elsewhere[1]],
                                                                             [elsewhere[0]]]))
    assert wait_for(f"{name} through the coordinator",
                    lambda: len(placed(admin(cluster.bootstrap_of(coordinator)), name)) == 3)
    set_group_configs(cluster.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    sent = set()
    for p in range(3):
        for i in range(4):
            value = f"{name}-{p}-{i}".encode()
            producer.produce(name, value, partition=p)
            sent.add(value)
    assert producer.flush(60) == 0

    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0,
                              "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([name])
        got = {}

        def read_all():
            msgs = [m for m in consumer.poll(1.0) if m.error() is None]
            for m in msgs:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                got[m.value()] = m.partition()
            if msgs:
                consumer.commit_sync(60)
            return set(got) == sent

        assert wait_for(f"every record of {name}", read_all)
        assert sorted(set(got.values())) == [0, 1, 2]
        with RawConnection(cluster.bootstrap_of(coordinator), timeout=90) as conn:  # ShareGroupDescribe
            described = conn.request(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
        assert described.error_code == ErrorCode.none
        assigned = [(tp.topic_name, sorted(tp.partitions)) for m in described.members
                    for tp in m.assignment.topic_partitions]
        assert assigned == [(name, [0, 1, 2])]
    finally:
        consumer.close()

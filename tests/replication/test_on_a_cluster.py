"""Replication behaviours that need real processes (freshet.local.cluster.LocalCluster: three controllers, three
brokers), on one cluster for the module (its tests run on one xdist worker, in this order): the brokers'
min.insync.replicas enforced on a topic without its own; a follower paused (SIGSTOP) while records arrive
leaves the ISR by its leader's lag rule before its session would fence it, and rejoins, the leader's
IsrShrinks / IsrExpands counters moving on /metrics; an open transaction whose partition leader is killed -9
(the transaction coordinator elsewhere) commits, or aborts, on the new leader as it would have on the old one.

The cluster: replica.lag.time.max.ms 2 s, a 30 s broker session (a paused broker is out of the ISR by lag
long before it is fenced; a killed one is fenced at once, its session connection closed)."""

import asyncio
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.errors import ErrorCode

from freshet.broker.replication.client import BrokerConnection
from freshet.client.offsets import watermark_offsets
from freshet.local.cluster import LocalCluster
from freshet.testing.raw_kafka import RawConnection

from .conftest import batch, produce

pytestmark = pytest.mark.xdist_group("replication-cluster")  # one worker, one cluster for the module

DEADLINE = 120.0  # generous: two cores shared by many test runs
LAG_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(3, directory=str(tmp_path_factory.mktemp("cluster")), session_timeout_ms=30_000,
                      broker_args=["--metrics-port", "0", "--replica-lag-time-max-ms", str(LAG_MS)]) as c:
        yield c


def wait_for(what: str, condition, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"not within {deadline:.0f} s: {what}"
        time.sleep(0.05)


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 30000})


def create(cluster, *topics: NewTopic) -> None:
    client = admin(cluster)  # kept while its futures are waited on
    for future in client.create_topics(list(topics)).values():
        future.result(DEADLINE)
    for topic in topics:
        wait_for(f"{topic.topic} fully replicated", lambda: all(
            (p := cluster.partition(topic.topic, i)) and p["leader"] > 0 and len(p["isr"]) == 3
            for i in range(topic.num_partitions)))


def fenced(cluster, node_id: int) -> bool:
    return any(b["fenced"] for b in cluster.metadata()["brokers"] if b["broker_id"] == node_id)


def produce_to(cluster, node_id: int, topic: str, acks: int, value: bytes):
    """One Produce request to broker ``node_id`` (no client retries): its partition answer."""
    async def one():
        connection = BrokerConnection("127.0.0.1", cluster.nodes[node_id].port, "h9-test")
        await connection.connect()
        try:
            answer, _ = await produce(connection, topic, batch(value), acks=acks)
            return answer
        finally:
            connection.close()

    return asyncio.run(one())


def set_broker_config(cluster, broker: str, name: str, value: str | None) -> None:
    """A broker config of broker ``broker`` ("" for the cluster-wide default, which confluent-kafka's
    ConfigResource does not take: IncrementalAlterConfigs sent as kafka-configs.sh --entity-default does), set
    or (None) deleted."""
    with RawConnection(cluster.bootstrap_of(1)) as connection:
        answer = connection.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": broker, "configs": [
            {"name": name, "config_operation": 0 if value is not None else 1, "value": value}]}],
            "validate_only": False})
    assert answer.responses[0].error_code == 0, answer.responses[0].error_message


def set_topic_config(cluster, topic: str, name: str, value: str | None) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    resource.add_incremental_config(ConfigEntry(name, value, incremental_operation=(
        AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE)))
    client = admin(cluster)
    client.incremental_alter_configs([resource])[resource].result(DEADLINE)


def watermarks(consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """The partition's (low, high) as its leader answers ListOffsets now, asked again while a leader elected a
    moment ago answers OFFSET_NOT_AVAILABLE (KIP-207) or another retriable error (freshet.client.offsets)."""
    return watermark_offsets(consumer, tp, DEADLINE)


def high_watermark(cluster, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw"})
    try:
        return watermarks(consumer, TopicPartition(topic, partition))[1]
    finally:
        consumer.close()


def test_the_brokers_min_insync_replicas_refuses_acks_all_on_a_topic_without_its_own(cluster):
    """min.insync.replicas as Kafka resolves it (ClusterView.min_insync_replicas): the topic's own, else the
    leader broker's, else the cluster-wide default (a BROKER resource named ""), else 1. Above the ISR's size (3)
    acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is written; acks=1 does not ask."""
    create(cluster, NewTopic("strict", 1, 3))
    leader = cluster.leader("strict")

    def refused_once_applied(what: str):
        # writes accepted until the leader has the new metadata ("pending"), then the one that is refused
        wait_for(what, lambda: produce_to(cluster, leader, "strict", -1, b"pending").error_code != ErrorCode.none)
        before = high_watermark(cluster, "strict")
        answer = produce_to(cluster, leader, "strict", -1, b"refused")
        assert answer.error_code == ErrorCode.not_enough_replicas
        assert "min.insync.replicas=4" in answer.error_message
        assert high_watermark(cluster, "strict") == before  # nothing written
        assert produce_to(cluster, leader, "strict", 1, b"acks=1").error_code == ErrorCode.none

    try:
        assert produce_to(cluster, leader, "strict", -1, b"default").error_code == ErrorCode.none  # Kafka's 1
        set_broker_config(cluster, "", "min.insync.replicas", "4")  # the cluster-wide default
        refused_once_applied("the cluster default applied by the leader")
        set_broker_config(cluster, str(leader), "min.insync.replicas", "2")  # the leader's own beats the default
        wait_for("the leader's own value applied", lambda: produce_to(
            cluster, leader, "strict", -1, b"pending").error_code == ErrorCode.none)
        set_topic_config(cluster, "strict", "min.insync.replicas", "4")  # the topic's own beats the broker's
        refused_once_applied("the topic's value applied")
        set_topic_config(cluster, "strict", "min.insync.replicas", None)
    finally:
        set_broker_config(cluster, "", "min.insync.replicas", None)
        set_broker_config(cluster, str(leader), "min.insync.replicas", None)
    wait_for("Kafka's default 1 again", lambda: produce_to(
        cluster, leader, "strict", -1, b"last").error_code == ErrorCode.none)
    records, _ = read_partition(cluster, "strict", 0, "read_uncommitted")
    values = [v for _, v in records]
    assert "refused" not in values and values.count("acks=1") == 2 and values[-1] == "last"


def scrape(cluster, node_id: int) -> dict[str, float]:
    with urllib.request.urlopen(cluster.metrics_url(node_id), timeout=30) as answer:
        text = answer.read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("kafka_server_replicamanager")}


def test_a_paused_follower_leaves_the_isr_by_lag_before_it_is_fenced_and_the_counters_show_it(cluster):
    """SIGSTOP of a follower while records arrive: its leader removes it from the ISR (AlterPartition) once
    replica.lag.time.max.ms passes without it catching up, while the controller still counts it alive (not
    fenced: its session is 30 s); resumed, it catches up and its leader adds it back. The leader's /metrics count
    both as the JMX exporter names Kafka's IsrShrinksPerSec / IsrExpandsPerSec."""
    create(cluster, NewTopic("lagging", 1, 3))
    leader = cluster.leader("lagging")
    follower = next(n for n in (1, 2, 3) if n != leader)
    before = scrape(cluster, leader)
    assert "kafka_server_replicamanager_isrshrinkspersec_total" not in before
    # the leader only: a client must not wait on the paused broker's silence
    producer = Producer({"bootstrap.servers": cluster.bootstrap_of(leader), "acks": "1", "linger.ms": 0})
    cluster.pause(follower)
    try:
        for i in range(5):
            producer.produce("lagging", b"%d" % i, partition=0)
        assert producer.flush(DEADLINE) == 0
        isr = wait_for("the paused follower out of the ISR", lambda: (
            (p := cluster.partition("lagging", 0)) and follower not in p["isr"] and p["isr"]))
        assert sorted(isr) == sorted(n for n in (1, 2, 3) if n != follower)
        assert not fenced(cluster, follower)  # the leader's lag rule, not the controller's fencing
        after = scrape(cluster, leader)
        assert after["kafka_server_replicamanager_isrshrinks_total"] \
            == before["kafka_server_replicamanager_isrshrinks_total"] + 1
        assert after["kafka_server_replicamanager_underreplicatedpartitions"] \
            == before["kafka_server_replicamanager_underreplicatedpartitions"] + 1
    finally:
        cluster.resume(follower)
    wait_for("the follower back in the ISR", lambda: follower in cluster.partition("lagging", 0)["isr"])
    after = scrape(cluster, leader)
    assert after["kafka_server_replicamanager_isrexpands_total"] \
        == before["kafka_server_replicamanager_isrexpands_total"] + 1
    assert after["kafka_server_replicamanager_underreplicatedpartitions"] \
        == before["kafka_server_replicamanager_underreplicatedpartitions"]


# -- transactions across a leader change -------------------------------------------------------------------


def read_partition(cluster, topic: str, partition: int, isolation: str) -> tuple[list[tuple[int, str]], int]:
    """What a consumer with ``isolation`` gets of the partition from its start: [(offset, value)], and the end it
    reads to (the last stable offset for read_committed, the high watermark for read_uncommitted, as the
    partition's leader answers ListOffsets) once it has fetched that far (control records are never delivered)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, partition)
        _, end = watermarks(consumer, tp)
        consumer.assign([TopicPartition(topic, partition, 0)])
        records, reached = [], [end == 0]

        def more():
            for m in consumer.consume(100, 0.5):
                if m.error() is None:
                    records.append((m.offset(), m.value().decode()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    reached[0] = reached[0] or m.offset() >= end
                else:
                    raise AssertionError(f"{isolation} consumer: {m.error().name()}")
            return reached[0]

        wait_for(f"a {isolation} consumer at offset {end} of {topic}-{partition}", more)
        return records, end
    finally:
        consumer.close()


def last_stable_offset(cluster, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lso", "isolation.level":
                         "read_committed"})
    try:
        return watermarks(consumer, TopicPartition(topic, partition))[1]
    finally:
        consumer.close()


def transactional_producer(cluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 0})
    producer.init_transactions(DEADLINE)
    return producer


def open_transaction(cluster, transactional_id: str, topic: str, prefix: str, count: int):
    """A new topic of 3 partitions and a transaction left open with records ``prefix-0`` ... on one of them whose
    leader is not the transaction coordinator (acknowledged by its ISR): (producer, coordinator, partition)."""
    producer = transactional_producer(cluster, transactional_id)
    coordinator = cluster.leader("__transaction_state", 0)
    create(cluster, NewTopic(topic, 3, 3))
    index = next(i for i in range(3) if cluster.leader(topic, i) != coordinator)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, f"{prefix}-{i}".encode(), partition=index)
    assert producer.flush(DEADLINE) == 0
    return producer, coordinator, index


def kill_leader(cluster, topic: str, partition: int) -> tuple[int, int]:
    """kill -9 of the partition's leader: (the killed broker, the new leader from the ISR)."""
    old = cluster.leader(topic, partition)
    cluster.kill(old)
    new = wait_for("a new leader", lambda: (n := cluster.leader(topic, partition)) > 0 and n != old and n)
    return old, new


def test_an_open_transaction_commits_on_the_new_leader_after_its_partition_leader_is_killed_9(cluster):
    """begin, 10 records to a partition (acknowledged by the ISR), kill -9 of its leader (the coordinator is
    another broker): the new leader knows the transaction is open (its last stable offset stays before the
    records, read_committed sees nothing); commit: the coordinator's marker reaches the new leader and a
    read_committed consumer reads the 10 records exactly once, the marker after them, LSO = high watermark."""
    producer, coordinator, index = open_transaction(cluster, "committer", "moved-commit", "c", 10)
    assert last_stable_offset(cluster, "moved-commit", index) == 0
    killed, new_leader = kill_leader(cluster, "moved-commit", index)
    assert killed != coordinator and cluster.leader("__transaction_state", 0) == coordinator
    try:
        # the new leader rebuilt the open transaction from the replicated batches
        assert last_stable_offset(cluster, "moved-commit", index) == 0
        assert read_partition(cluster, "moved-commit", index, "read_committed") == ([], 0)
        uncommitted, high = read_partition(cluster, "moved-commit", index, "read_uncommitted")
        assert high == 10 and [v for _, v in uncommitted] == [f"c-{i}" for i in range(10)]
        producer.commit_transaction(DEADLINE)
        wait_for("the commit marker on the new leader", lambda: last_stable_offset(
            cluster, "moved-commit", index) == 11)
        committed, end = read_partition(cluster, "moved-commit", index, "read_committed")
        assert end == 11  # 10 records and the marker: LSO = high watermark
        assert committed == [(i, f"c-{i}") for i in range(10)]
        assert cluster.leader("moved-commit", index) == new_leader
    finally:
        cluster.restart(killed)
        wait_for("every replica back in the ISR", lambda: cluster.fully_replicated(cluster.metadata()))


def test_a_transaction_aborted_after_its_partition_leader_is_killed_9_stays_invisible_and_the_producer_goes_on(
        cluster):
    """begin, 5 records, kill -9 of the partition's leader, 5 more to the new leader in the same transaction (the
    sequence numbers go on from the replicated producer state), abort: read_committed sees none of them,
    read_uncommitted sees all 10 and never the abort marker. The same producer (same id and epoch) then
    commits a transaction there. Once the killed broker is back, the new leader is killed too: the third
    leader, which had the abort marker only by replication, hides the aborted records the same way."""
    producer, coordinator, index = open_transaction(cluster, "aborter", "moved-abort", "a", 5)
    killed, new_leader = kill_leader(cluster, "moved-abort", index)
    assert killed != coordinator
    try:
        for i in range(5, 10):
            producer.produce("moved-abort", f"a-{i}".encode(), partition=index)
        assert producer.flush(DEADLINE) == 0  # accepted in sequence by the new leader
        producer.abort_transaction(DEADLINE)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("moved-abort", f"after-{i}".encode(), partition=index)
        producer.commit_transaction(DEADLINE)
        expected_committed = [(11 + i, f"after-{i}") for i in range(3)]  # 0-9 aborted, 10 the abort marker
        committed, end = read_partition(cluster, "moved-abort", index, "read_committed")
        assert (committed, end) == (expected_committed, 15)
        uncommitted, high = read_partition(cluster, "moved-abort", index, "read_uncommitted")
        assert high == 15
        assert uncommitted == [(i, f"a-{i}") for i in range(10)] + expected_committed
    finally:
        cluster.restart(killed)
    wait_for("every replica back in the ISR", lambda: cluster.fully_replicated(cluster.metadata()))
    second, third = kill_leader(cluster, "moved-abort", index)
    assert second == new_leader
    try:
        assert read_partition(cluster, "moved-abort", index, "read_committed") == (expected_committed, 15)
    finally:
        cluster.restart(second)
        wait_for("every replica back in the ISR", lambda: cluster.fully_replicated(cluster.metadata()))

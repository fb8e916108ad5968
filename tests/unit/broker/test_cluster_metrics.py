"""A cluster broker's ReplicaManager and KafkaController gauges on /metrics (``broker/cluster/metrics.py``), from a
view made by hand: each broker counts the partitions it holds and leads, and those it leads that are under-replicated
or being reassigned (replicas being added or removed), as Kafka's JMX exporter names them."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from freshet.broker.cluster.metrics import ClusterMetrics


def partition(index, replicas, isr, leader, adding=(), removing=()):
    return SimpleNamespace(index=index, replicas=tuple(replicas), isr=tuple(isr), leader=leader,
                           adding_replicas=tuple(adding), removing_replicas=tuple(removing))


VIEW = SimpleNamespace(controller_id=2, topics={
    "orders": SimpleNamespace(partitions=(
        partition(0, [1, 2, 3], [1, 2, 3], 1),
        partition(1, [2, 3, 1, 4], [2, 3, 1], 2, adding=[4], removing=[1]),  # moving from 1 to 4
        partition(2, [3, 1, 2], [3, 1], 3),  # under-replicated
        partition(3, [1, 2], [1, 2], 1, removing=[2]),  # shrinking: reassigning too
    )),
    "lonely": SimpleNamespace(partitions=(partition(0, [3], [], -1),)),  # offline
})


def gauges(node_id: int) -> dict[str, float]:
    broker = SimpleNamespace(cluster=SimpleNamespace(view=VIEW), config=SimpleNamespace(node_id=node_id),
                                replicas=SimpleNamespace(isr_shrinks=0, isr_expands=0))
    registry = CollectorRegistry()
    registry.register(ClusterMetrics(broker))
    text = generate_latest(registry).decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith(("kafka_server_replicamanager", "kafka_controller_kafkacontroller"))
            and not line.startswith("#")}


def test_each_broker_counts_its_partitions_leaders_and_reassigning_partitions():
    seen = {n: gauges(n) for n in (1, 2, 3, 4)}
    prefix = "kafka_server_replicamanager_"
    assert {n: m[prefix + "partitioncount"] for n, m in seen.items()} == {1: 4, 2: 4, 3: 4, 4: 1}
    assert {n: m[prefix + "leadercount"] for n, m in seen.items()} == {1: 2, 2: 1, 3: 1, 4: 0}
    # reassigning, counted by the leader: orders-1 (led by 2) and orders-3 (led by 1)
    assert {n: m[prefix + "reassigningpartitions"] for n, m in seen.items()} == {1: 1, 2: 1, 3: 0, 4: 0}
    # orders-1's ISR lacks only the replica being added: not under-replicated (Kafka's count); orders-2 is
    assert {n: m[prefix + "underreplicatedpartitions"] for n, m in seen.items()} == {1: 0, 2: 0, 3: 1, 4: 0}
    assert all(m["kafka_controller_kafkacontroller_offlinepartitionscount"] == 1 for m in seen.values())
    assert [n for n, m in seen.items() if m["kafka_controller_kafkacontroller_activecontrollercount"]] == [2]


def test_a_view_without_reassignment_fields_counts_none():
    bare = SimpleNamespace(index=0, replicas=(1, 2), isr=(1, 2), leader=1)
    broker = SimpleNamespace(cluster=SimpleNamespace(view=SimpleNamespace(
        controller_id=1, topics={"t": SimpleNamespace(partitions=(bare,))})), config=SimpleNamespace(node_id=1),
        replicas=None)
    registry = CollectorRegistry()
    registry.register(ClusterMetrics(broker))
    text = generate_latest(registry).decode()
    assert "kafka_server_replicamanager_reassigningpartitions 0.0" in text
    assert "kafka_server_replicamanager_leadercount 1.0" in text

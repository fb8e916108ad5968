r"""A broker's cluster figures on ``/metrics``, named as the Prometheus JMX exporter names Kafka's MBeans with its
own Kafka configuration (prometheus/jmx_exporter examples/kafka-2_0_0.yml, the same rules in kafka-kraft-3_0_0.yml):
``kafka.server:type=ReplicaManager`` (UnderReplicatedPartitions, LeaderCount, PartitionCount,
ReassigningPartitions: ``kafka.(\w+)<type=(.+), name=(.+)><>Value`` -> ``kafka_$1_$2_$3``, lower-cased; a
reassigning partition, one with replicas being added or removed, is counted by its leader as Kafka counts it;
IsrShrinksPerSec, IsrExpandsPerSec, meters whose Count ``kafka.(\w+)<type=(.+), name=(.+)PerSec\w*><>Count``
makes ``kafka_$1_$2_$3_total`` without the PerSec: ``kafka_server_replicamanager_isrshrinks_total``, counted by
this broker's leaders) and ``kafka.controller:type=KafkaController`` (OfflinePartitionsCount, from the cluster's
metadata; ActiveControllerCount, 1 on the node whose controller is active, so the sum over the cluster is 1)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def reassigning(partition) -> bool:
    """A partition being reassigned: replicas being added or removed (read defensively: a view without
    reassignments has neither field)."""
    return bool(getattr(partition, "adding_replicas", ()) or getattr(partition, "removing_replicas", ()))


def replication_factor(partition) -> int:
    """Its replicas less those a reassignment is adding (Kafka's count: a new replica catching up does not make
    the partition under-replicated)."""
    return len(partition.replicas) - len(getattr(partition, "adding_replicas", ()))


class ClusterMetrics:
    """A prometheus_client collector over a cluster broker's view and replica manager."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def collect(self):
        view = self.broker.cluster.view
        node = self.broker.config.node_id
        replicas = self.broker.replicas
        partitions = [p for t in view.topics.values() for p in t.partitions]
        mine = [p for p in partitions if node in p.replicas]
        gauges = (
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Partitions this broker leads whose ISR is smaller than their replicas (less those being added)",
             sum(1 for p in partitions if p.leader == node and len(p.isr) < replication_factor(p))),
            ("kafka_server_replicamanager_leadercount", "Partitions this broker leads",
             sum(1 for p in partitions if p.leader == node)),
            ("kafka_server_replicamanager_partitioncount", "Partitions with a replica on this broker", len(mine)),
            ("kafka_server_replicamanager_reassigningpartitions",
             "Partitions this broker leads whose replicas are being reassigned",
             sum(1 for p in partitions if p.leader == node and reassigning(p))),
            ("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions of the cluster without a leader",
             sum(1 for p in partitions if p.leader < 0)),
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "1 when this node's controller is the active one", int(view.controller_id == node)),
        )
        for name, doc, value in gauges:
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        for name, doc, attribute in (
                ("kafka_server_replicamanager_isrshrinks", "ISR shrinks this broker made as leader",
                 "isr_shrinks"),
                ("kafka_server_replicamanager_isrexpands", "ISR expansions this broker made as leader",
                 "isr_expands")):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], getattr(replicas, attribute, 0))
            yield family

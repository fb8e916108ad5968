"""``ClusterView``: one metadata snapshot of the controllers, as this broker knows it (immutable: a new one
replaces it on every change, so a request handler reads one consistent version)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ..replication.metadata import BrokerEndpoint

NO_LEADER = -1


BrokerInfo = BrokerEndpoint  # a broker as the metadata gives it: the replica manager's own type

@dataclass(frozen=True)
class PartitionInfo:
    index: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: offline
    leader_epoch: int
    partition_epoch: int
    adding_replicas: tuple[int, ...] = ()  # a reassignment in progress (KIP-455)
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class ClusterView:
    offset: int = -1  # the metadata offset (every applied command): newer snapshots only
    version: int = -1  # the controllers' change counter the long poll waits on
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # "" = cluster default
    acls: tuple[dict[str, str], ...] = ()  # the cluster's ACL bindings (each field a string)
    scram: dict[str, dict[str, dict]] = field(default_factory=dict)  # user -> mechanism -> credential (base64)
    quotas: dict[tuple, dict[str, float]] = field(default_factory=dict)  # ((type, name), ...) -> key -> value
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> its configs

    @classmethod
    def from_snapshot(cls, snapshot: dict) -> "ClusterView":
        brokers = {
            b["broker_id"]: BrokerInfo(b["broker_id"], b["host"], b["port"], b.get("rack"), b["fenced"])
            for b in snapshot.get("brokers", [])
        }
        topics = {}
        for t in snapshot.get("topics", []):
            partitions = tuple(
                PartitionInfo(p["partition"], tuple(p["replicas"]), tuple(p["isr"]), p["leader"], p["leader_epoch"],
                              p["partition_epoch"], tuple(p.get("adding_replicas", ())),
                              tuple(p.get("removing_replicas", ())))
                for p in t["partitions"]
            )
            topics[t["name"]] = TopicInfo(t["name"], uuid.UUID(t["topic_id"]), partitions, dict(t.get("configs", {})))
        return cls(snapshot.get("offset", -1), snapshot.get("version", -1), snapshot.get("controller_id", -1),
                   brokers, topics, dict(snapshot.get("broker_configs", {})), tuple(snapshot.get("acls", ())),
                   dict(snapshot.get("scram_credentials", {})),
                   {tuple(tuple(p) for p in q["entity"]): dict(q["values"]) for q in snapshot.get("quotas", [])},
                   dict(snapshot.get("group_configs", {})))

    def live_brokers(self) -> list[BrokerInfo]:
        """The unfenced brokers, by id: those clients are told of."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def offline_replicas(self, partition: PartitionInfo) -> list[int]:
        """Replicas on brokers that are fenced or gone (Kafka: replicas on offline log dirs or brokers)."""
        return [r for r in partition.replicas if r not in self.brokers or self.brokers[r].fenced]

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def broker_config(self, name: str, node_id: int) -> str | None:
        """A broker config set in the cluster metadata: this broker's own value, else the cluster default."""
        for level in (str(node_id), ""):
            value = self.broker_configs.get(level, {}).get(name)
            if value is not None:
                return value
        return None

    def min_insync_replicas(self, topic: str, node_id: int) -> int:
        """The topic's min.insync.replicas, else the brokers' (cluster metadata), else Kafka's default 1."""
        info = self.topics.get(topic)
        value = (info.configs.get("min.insync.replicas") if info else None) or self.broker_config(
            "min.insync.replicas", node_id)
        return int(value) if value else 1

"""The topics a KIP-848 (consumer) or KIP-932 (share) group coordinator subscribes its members to and assigns:
every topic of the cluster, as Kafka's coordinator reads the metadata image, not only those this broker holds a
replica of (a replication factor 1 topic placed on another broker is assigned as any other).
A one-node broker's are its own registry's.

``RegistryTopics`` (one node, the default) and ``ClusterTopics`` (the cluster's metadata, set by the cluster
membership) answer the same three questions: a topic by name (its id, partition count, whether it is internal),
every topic name (a regex subscription), and a topic's name by id (the partitions a member says it owns)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..topics.registry import TopicRegistry

# Kafka's Topic.INTERNAL_TOPICS: never subscribed to, by name or by regex
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True)
class GroupTopic:
    name: str
    topic_id: uuid.UUID
    partitions: int  # how many
    internal: bool


class RegistryTopics:
    """This broker's own topics (a single broker holds every topic)."""

    def __init__(self, registry: "TopicRegistry") -> None:
        self.registry = registry

    def get(self, name: str) -> GroupTopic | None:
        topic = self.registry.get(name)
        return None if topic is None else GroupTopic(name, topic.topic_id, len(topic.partitions), topic.internal)

    def names(self) -> list[str]:
        return list(self.registry.topics)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        topic = self.registry.by_id.get(topic_id)
        return None if topic is None else topic.name


class ClusterTopics:
    """Every topic of the cluster, as the metadata ``view()`` (the broker's latest ``cluster.view.ClusterView``,
    not imported here: the cluster package builds on this one) lists it."""

    def __init__(self, view: Callable) -> None:
        self.view = view

    def get(self, name: str) -> GroupTopic | None:
        info = self.view().topics.get(name)
        return None if info is None else GroupTopic(name, info.topic_id, len(info.partitions),
                                                    name in INTERNAL_TOPICS)

    def names(self) -> list[str]:
        return list(self.view().topics)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        info = self.view().by_id(topic_id)
        return None if info is None else info.name


GroupTopics = RegistryTopics | ClusterTopics

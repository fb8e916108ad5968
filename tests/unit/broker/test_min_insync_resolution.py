"""min.insync.replicas of a partition on a cluster broker (``ClusterView.min_insync_replicas``, which the replica
manager gives each partition it leads): the topic's own value, else the leader broker's own, else the cluster-wide
default (broker config level ""), else Kafka's default 1. The end-to-end refusal is
tests/replication/test_on_a_cluster.py::test_the_brokers_min_insync_replicas_refuses_acks_all_on_a_topic_without_its_own."""

import uuid

from freshet.broker.cluster.view import ClusterView, PartitionInfo, TopicInfo


def view(topic_configs: dict, broker_configs: dict) -> ClusterView:
    partitions = (PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1, 0, 0),)
    return ClusterView(topics={
        "own": TopicInfo("own", uuid.uuid4(), partitions, dict(topic_configs)),
        "plain": TopicInfo("plain", uuid.uuid4(), partitions, {}),
    }, broker_configs=broker_configs)


def test_the_topics_own_value_comes_first():
    cluster = view({"min.insync.replicas": "3"}, {"": {"min.insync.replicas": "2"}, "1": {"min.insync.replicas": "1"}})
    assert cluster.min_insync_replicas("own", 1) == 3


def test_a_topic_without_its_own_takes_the_brokers_own_then_the_cluster_default_then_one():
    both = view({}, {"": {"min.insync.replicas": "2"}, "1": {"min.insync.replicas": "3"}})
    assert both.min_insync_replicas("plain", 1) == 3  # broker 1's own
    assert both.min_insync_replicas("plain", 2) == 2  # broker 2 has none: the cluster default
    default_only = view({}, {"": {"min.insync.replicas": "2"}})
    assert default_only.min_insync_replicas("plain", 1) == 2
    assert default_only.min_insync_replicas("no-such-topic", 1) == 2
    other_config_only = view({}, {"": {"retention.ms": "1000"}, "1": {"unclean.leader.election.enable": "true"}})
    assert other_config_only.min_insync_replicas("plain", 1) == 1  # Kafka's default
    assert view({}, {}).min_insync_replicas("plain", 1) == 1

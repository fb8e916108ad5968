"""The broker's side of the control plane (issue #46): membership in a cluster run by the controllers
(``freshet.controller``). Used only in cluster mode (``freshet broker start --controller ...``); the one-node broker
creates none of it.

- ``view``: ``ClusterView``, this broker's copy of the controllers' metadata (brokers, topics, partitions, leaders,
  ISRs, configs, the active controller), what Metadata / DescribeCluster / DescribeTopicPartitions answer.
- ``membership``: ``ClusterMembership``: registers, heartbeats on its session connection, follows the metadata
  by long poll, keeps the local topics and the replica manager in step with it, forwards topic changes and
  AlterPartition to the controller.
- ``admin``: the admin requests of a broker in a cluster (topics and their configs through the controller) and
  the topics and brokers Metadata answers.
"""

from .membership import ClusterError, ClusterMembership, parse_controllers
from .view import BrokerInfo, ClusterView, PartitionInfo, TopicInfo

__all__ = ["BrokerInfo", "ClusterError", "ClusterMembership", "ClusterView", "PartitionInfo", "TopicInfo",
           "parse_controllers"]

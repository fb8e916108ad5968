"""Kafka's replication data plane: leaders, followers, the high watermark, the ISR, leader epochs
(``ReplicaManager``, fed by the control plane in ``freshet.broker.cluster``)."""

from .leader import ReplicationError
from .manager import AlterIsr, BrokerEndpoint, PartitionState, ReplicaManager

__all__ = ["AlterIsr", "BrokerEndpoint", "PartitionState", "ReplicaManager", "ReplicationError"]

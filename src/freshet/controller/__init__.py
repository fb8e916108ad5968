"""The cluster metadata layer (issue #46): the controller's replicated state machine.

- ``commands``: the metadata log's commands (RegisterBroker, BrokerHeartbeat, FenceStaleBrokers, CreateTopic,
  AlterPartition, ElectLeaders, configs, SCRAM users, ACLs, quotas), each carrying its time and random choices.
- ``state``: ``ClusterMetadata`` and its deterministic ``apply``, answering Kafka's error names.
- ``node``: ``Controller``, the state machine replicated by pysyncobj's Raft; the Raft leader is the active
  controller; a JSON endpoint for commands and metadata snapshots.
- ``client``: ``ControllerClient`` for that endpoint.

Not wired into the broker yet; ``docs/replication.md`` says what exists and what comes next. The controller
imports nothing of ours but itself (import-linter enforces it).
"""

from .state import ClusterMetadata, Result, place_replicas

__all__ = ["ClusterMetadata", "Result", "place_replicas"]

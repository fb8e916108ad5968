"""KIP-392, fetching from the closest replica: a consumer that names its rack (``client.rack``, Fetch v11+
``rack_id``) is told by the partition's leader to read from an in-sync follower in its rack
(``preferred_read_replica``), and that follower serves it up to its own high watermark, which the leader's fetch
responses keep in step (``follower.py``). Chosen as Kafka's ``RackAwareReplicaSelector`` does when the broker is
started with ``--replica-selector-class org.apache.kafka.common.replica.RackAwareReplicaSelector``
(``replica.selector.class``); without it (Kafka's default, ``LeaderSelector``) consumers read from leaders."""

from __future__ import annotations

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
SELECTORS = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)
FETCH_FROM_FOLLOWER_VERSION = 11  # Fetch v11 brought rack_id and preferred_read_replica


def preferred_read_replica(replicas, leader, client_rack: str, fetch_offset: int) -> int:
    """For a consumer in ``client_rack`` fetching ``fetch_offset`` from this leader: the node id of the replica
    it should read from, or -1 (this leader). As Kafka's RackAwareReplicaSelector: the leader when it is in the
    client's rack or no replica is; else, of the ISR followers in that rack that have the offset, the most
    caught up (the lowest node id among equals)."""
    if getattr(replicas.broker.config, "replica_selector_class", None) != RACK_AWARE_SELECTOR or not client_rack:
        return -1
    if _rack(replicas, replicas.node_id) == client_rack:
        return -1
    candidates = [(progress.log_end_offset, -node) for node, progress in leader.followers.items()
                  if node in leader.isr and progress.log_end_offset >= fetch_offset
                  and _rack(replicas, node) == client_rack]
    return -max(candidates)[1] if candidates else -1


def reads_as_follower(replicas, topic: str, index: int, api_version: int) -> bool:
    """A consumer's Fetch (v11+, which may follow a preferred_read_replica) of a partition this broker follows,
    on a broker with the rack-aware selector: served here, up to this replica's high watermark. (Kafka's
    followers serve any consumer Fetch v11+; here, as consumers only come to a follower sent by a leader's
    selector, a broker without one answers NOT_LEADER_OR_FOLLOWER with the leader, as before KIP-392.)"""
    return (api_version >= FETCH_FROM_FOLLOWER_VERSION and (topic, index) in replicas.followed
            and getattr(replicas.broker.config, "replica_selector_class", None) == RACK_AWARE_SELECTOR)


def _rack(replicas, node_id: int) -> str | None:
    endpoint = replicas.brokers.get(node_id)
    return endpoint.rack if endpoint is not None and not endpoint.fenced else None

"""Partition reassignment on a broker of a cluster (KIP-455): what AlterPartitionReassignments and
ListPartitionReassignments do, and what decommission / rebalance call.

A reassignment is cluster metadata: each partition's change goes to the controller (``AlterPartitionReassignment``),
which checks it (Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICATION_FACTOR,
NO_REASSIGNMENT_IN_PROGRESS; a refusal changes nothing) and makes the replicas the target plus the replicas being
removed. The brokers follow the metadata: the new replicas start fetching from the leader, join the ISR once caught
up (AlterPartition), and the controller then completes the move (the removed replicas stop and delete their logs:
``ReplicaManager``). The answer waits until this broker's view holds each accepted change, so the client's next
ListPartitionReassignments or Metadata sees it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .view import ClusterView

WAIT_FOR_VIEW_S = 30.0

Key = tuple[str, int]


async def reassign_partitions(broker, plan: dict[Key, list[int] | None],
                              allow_replication_factor_change: bool = True) -> dict[Key, tuple[ErrorCode, str | None]]:
    """Starts (a list of broker ids) or cancels (None) the reassignment of each partition of ``plan``; answers each
    partition's error code and message (``ErrorCode.none`` when the controller took it). Partitions are independent:
    a refused one does not stop the others, as in Kafka."""
    results: dict[Key, tuple[ErrorCode, str | None]] = {}
    accepted: dict[Key, int] = {}
    for (topic, index), replicas in plan.items():
        command: dict = {"command": "AlterPartitionReassignment", "topic": topic, "partition": index,
                         "allow_replication_factor_change": allow_replication_factor_change}
        if replicas is None:
            command["cancel"] = True
        else:
            command["replicas"] = [int(r) for r in replicas]
        answer = await broker.cluster.command(command)
        results[(topic, index)] = (ErrorCode(answer["error_code"]), answer.get("message") or None)
        if answer["error"] == "NONE":
            accepted[(topic, index)] = answer["value"]["partition_epoch"]

    def seen(view: ClusterView) -> bool:
        for (topic, index), epoch in accepted.items():
            info = view.topics.get(topic)
            if info is not None and index < len(info.partitions) and info.partitions[index].partition_epoch < epoch:
                return False
        return True

    if accepted:
        await broker.cluster.wait_for(seen, WAIT_FOR_VIEW_S)
    return results


def ongoing(view: ClusterView, wanted: list[Key] | None = None) -> dict[str, list[dict]]:
    """The reassignments in progress, by topic (ListPartitionReassignments): each partition's replicas and those
    being added and removed; only ``wanted`` partitions when given (others, and unknown ones, left out)."""
    topics: dict[str, list[dict]] = {}
    keep = set(wanted) if wanted is not None else None
    for name, info in sorted(view.topics.items()):
        for p in info.partitions:
            if not (p.adding_replicas or p.removing_replicas) or (keep is not None and (name, p.index) not in keep):
                continue
            topics.setdefault(name, []).append({
                "partition_index": p.index, "replicas": list(p.replicas),
                "adding_replicas": list(p.adding_replicas), "removing_replicas": list(p.removing_replicas)})
    return topics

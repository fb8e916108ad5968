"""AlterPartitionReassignments (45, v0-1) and ListPartitionReassignments (46, v0): KIP-455, what
``kafka-reassign-partitions.sh``, Kafka's Admin client and ``freshet topic reassign`` send.

In a cluster each partition's change goes to the controller (``cluster.reassign``); ALTER on the cluster is needed
to change, DESCRIBE on the cluster to list (CLUSTER_AUTHORIZATION_FAILED, nothing changed). A one-node broker holds
every partition's only replica: a target of just this broker is already in place, any other broker id is
INVALID_REPLICA_ASSIGNMENT, and nothing is ever in progress."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..cluster import reassign
from ..context import Request, RequestContext, Response
from ..security.acls import ALTER, CLUSTER, CLUSTER_NAME, DESCRIBE


def alter_partition_reassignments(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    plan: dict[tuple[str, int], list[int] | None] = {}
    for topic in request.topics:
        for p in topic.partitions:
            plan[(topic.name, p.partition_index)] = list(p.replicas) if p.replicas is not None else None
    allow = bool(getattr(request, "allow_replication_factor_change", True))  # v1 (KIP-860)
    if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        code = ErrorCode.cluster_authorization_failed
        return _altered(request, {key: (code, "ALTER on the cluster is needed") for key in plan}, allow, code)
    if broker.cluster is None:
        return _altered(request, {key: _one_node(broker, key, replicas, allow) for key, replicas in plan.items()},
                        allow)

    async def run() -> dict:
        return _altered(request, await reassign.reassign_partitions(broker, plan, allow), allow)

    return run()


def _one_node(broker, key: tuple[str, int], replicas: list[int] | None, allow: bool) -> tuple[ErrorCode, str | None]:
    topic, index = key
    if broker.registry.partition(topic, index) is None:
        return ErrorCode.unknown_topic_or_partition, f"no partition {topic}-{index}"
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, f"no reassignment of {topic}-{index} is in progress"
    node = broker.config.node_id
    if not replicas or len(set(replicas)) != len(replicas) or set(replicas) != {node}:
        return ErrorCode.invalid_replica_assignment, f"{replicas}: this one-node broker is broker {node} alone"
    return ErrorCode.none, None


def _altered(request: Request, results: dict, allow: bool, error: ErrorCode = ErrorCode.none) -> dict:
    return {
        "throttle_time": 0, "allow_replication_factor_change": allow, "error_code": error,
        "error_message": "ALTER on the cluster is needed" if error != ErrorCode.none else None,
        "responses": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": results[(topic.name, p.partition_index)][0],
                 "error_message": results[(topic.name, p.partition_index)][1]}
                for p in topic.partitions]}
            for topic in request.topics
        ],
    }


def list_partition_reassignments(ctx: RequestContext, request: Request) -> dict:
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "DESCRIBE on the cluster is needed", "topics": []}
    cluster = ctx.broker.cluster
    topics = {}
    if cluster is not None:
        wanted = None if request.topics is None else [
            (t.name, int(p)) for t in request.topics for p in t.partition_indexes]
        topics = reassign.ongoing(cluster.view, wanted)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}


APIS = {
    45: (0, 1, alter_partition_reassignments),
    46: (0, 0, list_partition_reassignments),
}

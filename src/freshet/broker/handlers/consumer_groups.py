"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: Kafka 4's consumer group protocol (KIP-848)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..context import Request, RequestContext
from ..groups.consumer import ConsumerGroupError
from ..groups.offsets import OFFSETS_TOPIC, append_failure
from ..security.acls import DESCRIBE, GROUP, READ
from .groups import COMMIT_TIMEOUT_S, not_coordinator, with_authorized_operations


def group_kind(broker, group_id: str) -> str | None:
    """Which protocol a group id belongs to: 'consumer', 'classic', 'share', or None if unknown.
    A classic group with no members (committed offsets only) counts as classic too."""
    if group_id in broker.consumer_groups.groups:
        return "consumer"
    if group_id in broker.groups.groups or group_id in broker.offsets.offsets:
        return "classic"
    if group_id in broker.share_groups.groups:
        return "share"
    return None


def _heartbeat_error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}


def consumer_group_heartbeat(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    group_id = request.group_id
    if not ctx.allowed(READ, GROUP, group_id):
        return _heartbeat_error(ErrorCode.group_authorization_failed, f"not authorized to read group {group_id}")
    if not_coordinator(ctx):
        return _heartbeat_error(ErrorCode.not_coordinator, "this broker is not the groups' coordinator")
    kind = group_kind(broker, group_id)
    if kind == "share":
        return _heartbeat_error(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
    if kind == "classic":
        classic = broker.groups.group(group_id)
        if classic is not None and classic.members:
            return _heartbeat_error(ErrorCode.group_id_not_found,
                                    f"Group {group_id} is a classic group with members, not a consumer group.")
    topics = broker.consumer_groups.topics  # the cluster's metadata in a cluster, not only this broker's replicas
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            name = topics.name_of(tp.topic_id)
            if name is not None and tp.partitions:
                owned[name] = frozenset(tp.partitions)
    try:
        result = broker.consumer_groups.heartbeat(
            group_id, request.member_id, request.member_epoch, instance_id=request.instance_id,
            rack_id=request.rack_id, rebalance_timeout_ms=int(request.rebalance_timeout.total_seconds() * 1000),
            subscribed_names=request.subscribed_topic_names,
            subscribed_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor, owned=owned, client_id=ctx.header.client_id or "",
            client_host=ctx.peer_host.lstrip("/"), version=ctx.version)
    except ConsumerGroupError as exc:
        return _heartbeat_error(exc.error_code, str(exc))
    if kind == "classic":
        broker.groups.groups.pop(group_id, None)  # an empty classic group becomes a consumer group
    assignment = result["assignment"]
    if assignment is not None:
        found = {name: (topics.get(name), parts) for name, parts in sorted(assignment.items())}
        assignment = {"topic_partitions": [{"topic_id": topic.topic_id, "partitions": sorted(parts)}
                                           for topic, parts in found.values() if topic is not None]}
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "member_id": result["member_id"], "member_epoch": result["member_epoch"],
            "heartbeat_interval": result["heartbeat_interval_ms"], "assignment": assignment}
    if result["written"] is None:
        return body
    broker.group_commit.written(broker.offsets.partition)  # wakes the followers' fetches of __consumer_offsets

    async def when_replicated() -> dict:
        # as Kafka's coordinator: the member learns its new epoch or partitions once the group's records are in the
        # ISR of __consumer_offsets, so that the next coordinator knows them too
        code = await append_failure(broker, OFFSETS_TOPIC, broker.offsets.partition, result["written"],
                                    COMMIT_TIMEOUT_S)
        return body if code is None else _heartbeat_error(code, "the group's state was not replicated")

    return when_replicated()


def _described_assignment(topics, assignment) -> dict:
    parts = []
    for name, indexes in sorted(assignment.items()):
        topic = topics.get(name)
        if topic is not None:
            parts.append({"topic_id": topic.topic_id, "topic_name": name, "partitions": sorted(indexes)})
    return {"topic_partitions": parts}


def consumer_group_describe(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    topics = broker.consumer_groups.topics
    out = []
    for group_id in request.group_ids:
        empty = {"group_id": group_id, "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                 "members": []}
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            out.append({**empty, "error_code": ErrorCode.group_authorization_failed, "group_state": "",
                        "error_message": f"not authorized to describe group {group_id}"})
            continue
        if not_coordinator(ctx):
            out.append({**empty, "error_code": ErrorCode.not_coordinator, "group_state": "",
                        "error_message": "this broker is not the groups' coordinator"})
            continue
        group = broker.consumer_groups.group(group_id)
        if group is None:
            kind = group_kind(broker, group_id)
            message = f"Group {group_id} is not a consumer group." if kind else f"Group {group_id} not found."
            out.append({**empty, "error_code": ErrorCode.group_id_not_found, "group_state": "Dead",
                        "error_message": message})
            continue
        members = []
        for m in group.members.values():
            members.append({
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_names), "subscribed_topic_regex": m.subscribed_regex,
                "assignment": _described_assignment(topics, m.assigned),
                "target_assignment": _described_assignment(topics, group.target.get(m.member_id, {})),
                "member_type": 1,  # a consumer-protocol member (0 would be a classic one)
            })
        out.append({"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                    "group_state": group.state, "group_epoch": group.epoch,
                    "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor, "members": members})
    return {"throttle_time": 0, "groups": with_authorized_operations(ctx, request, out)}


APIS = {
    68: (0, 1, consumer_group_heartbeat),
    69: (0, 1, consumer_group_describe),
}

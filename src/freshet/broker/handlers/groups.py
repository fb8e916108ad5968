"""FindCoordinator and the consumer-group APIs: membership, rebalances, committed offsets."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from freshet.log import StorageError

from ..context import Request, RequestContext, Response
from ..groups.classic import COMPLETING, DEAD, EMPTY, PREPARING, GroupError
from ..groups.consumer import ConsumerGroupError
from ..groups.offsets import OFFSETS_TOPIC, CommittedOffset, append_failure, failed_append_code
from ..groups.share import ShareGroupError
from ..security.acls import CLUSTER, CLUSTER_NAME, DELETE, DESCRIBE, GROUP, READ, TOPIC, TRANSACTIONAL_ID
from ..transactions import TXN_STATE_TOPIC
from .share_state import delete_share_group_in_cluster, find_share_coordinator

MAX_METADATA = 4096  # offset.metadata.max.bytes


def find_coordinator(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    host, port = broker.advertised(ctx.connection.listener if ctx.connection else None)
    node = {"node_id": broker.config.node_id, "host": host, "port": port}
    keys = getattr(request, "coordinator_keys", None)
    key_type = getattr(request, "key_type", 0)
    if key_type == 2:  # share-partition keys: the share coordinator (KIP-932)
        return find_share_coordinator(ctx, request)
    if broker.cluster is not None:  # in a cluster: the leader of __consumer_offsets / __transaction_state (#46)
        found = broker.cluster.coordinator(TXN_STATE_TOPIC if key_type == 1 else OFFSETS_TOPIC)
        node = {"node_id": found.node_id, "host": found.host, "port": found.port} if found else None
    resource, refused = ((TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed) if key_type == 1
                         else (GROUP, ErrorCode.group_authorization_failed))

    def answer(key: str) -> dict:
        if not ctx.allowed(DESCRIBE, resource, key):
            return {"error_code": refused, "error_message": None, "node_id": -1, "host": "", "port": -1}
        if node is None:
            return {"error_code": ErrorCode.coordinator_not_available, "error_message": "no live coordinator",
                    "node_id": -1, "host": "", "port": -1}
        return {"error_code": ErrorCode.none, "error_message": None, **node}

    if keys is None:  # v0-3: one key
        return {"throttle_time": 0, **answer(request.key)}
    return {"throttle_time": 0, "coordinators": [{"key": key, **answer(key)} for key in keys]}


def not_coordinator(ctx: RequestContext) -> bool:
    """In a cluster, whether this broker is not the groups' coordinator (the leader of ``__consumer_offsets``):
    as Kafka's brokers, it then answers a group request NOT_COORDINATOR, and the client asks FindCoordinator
    again. Served here, a commit would be appended to a follower's copy of the log and a fetch answered from
    it."""
    return ctx.broker.cluster is not None and not ctx.broker.cluster.coordinates()


def partition_exists(broker, topic: str, index: int) -> bool:
    """Whether the partition exists anywhere in the cluster (Kafka's metadata cache), not only among this broker's
    replicas: a group coordinator takes commits of topics it holds no replica of (a replication factor 1 topic
    led elsewhere), as Kafka's does."""
    if broker.cluster is not None:
        info = broker.cluster.view.topics.get(topic)
        return info is not None and 0 <= index < len(info.partitions)
    return broker.registry.partition(topic, index) is not None


def _error_body(body: dict, exc: GroupError) -> dict:
    body["error_code"] = exc.error_code
    return body


def join_group(ctx: RequestContext, request: Request) -> Response:
    coordinator = ctx.broker.groups
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
                "protocol_type": None, "protocol_name": None, "leader": "", "member_id": request.member_id,
                "members": []}

    if not_coordinator(ctx):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "generation_id": -1,
                "protocol_type": None, "protocol_name": None, "leader": "", "member_id": request.member_id,
                "members": []}
    consumer_group = ctx.broker.consumer_groups.group(request.group_id)
    if consumer_group is not None:
        if consumer_group.members:  # a Kafka 4 consumer group: its members heartbeat, they do not join
            return {"throttle_time": 0, "error_code": ErrorCode.inconsistent_group_protocol, "generation_id": -1,
                    "protocol_type": None, "protocol_name": None, "leader": "", "member_id": request.member_id,
                    "members": []}
        ctx.broker.consumer_groups.delete(request.group_id)  # an empty one becomes a classic group (its records go)

    async def run() -> dict:
        try:
            result = await coordinator.join(
                request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                ctx.header.client_id or "", ctx.peer_host, int(request.session_timeout.total_seconds() * 1000),
                int(getattr(request, "rebalance_timeout", request.session_timeout).total_seconds() * 1000),
                request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
                require_known_member_id=ctx.version >= 4,
            )
            if result is None:
                raise GroupError(ErrorCode.unknown_member_id)
            return result
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.error_code, "generation_id": -1, "protocol_type": None,
                    "protocol_name": None, "leader": "", "member_id": request.member_id, "members": []}

    return run()


def sync_group(ctx: RequestContext, request: Request) -> Response:
    coordinator = ctx.broker.groups
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    if not_coordinator(ctx):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "protocol_type": None,
                "protocol_name": None, "assignment": b""}

    async def run() -> dict:
        try:
            return await coordinator.sync(
                request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                request.generation_id, {a.member_id: bytes(a.assignment) for a in request.assignments},
            )
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.error_code, "protocol_type": None, "protocol_name": None,
                    "assignment": b""}

    return run()


def heartbeat(ctx: RequestContext, request: Request) -> dict:
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    if not_coordinator(ctx):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator}
    code = ctx.broker.groups.heartbeat(request.group_id, request.member_id,
                                       getattr(request, "group_instance_id", None), request.generation_id)
    return {"throttle_time": 0, "error_code": code}


def leave_group(ctx: RequestContext, request: Request) -> dict:
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    if not_coordinator(ctx):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "members": []}
    if hasattr(request, "members"):
        wanted = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        wanted = [(request.member_id, None)]
    results = ctx.broker.groups.leave(request.group_id, wanted)
    top = ErrorCode.none
    if not hasattr(request, "members") and results:
        top = results[0][2]
    return {"throttle_time": 0, "error_code": top, "members": [
        {"member_id": mid, "group_instance_id": iid, "error_code": code} for mid, iid, code in results]}


def offset_commit(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
    topics_out = []
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    group_error = ErrorCode.none  # the whole request's
    membership_error = ErrorCode.none  # answered for the partitions that exist (as Kafka, topics come first)
    if not request.group_id:
        group_error = ErrorCode.invalid_group_id
    elif not ctx.allowed(READ, GROUP, request.group_id):
        group_error = ErrorCode.group_authorization_failed
    elif not_coordinator(ctx):
        group_error = ErrorCode.not_coordinator
    else:
        try:
            check_commit(broker, request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                         generation)
        except (GroupError, ConsumerGroupError) as exc:
            membership_error = exc.error_code
    now = int(time.time() * 1000)
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code = group_error
            if code == ErrorCode.none:
                metadata = p.committed_metadata or ""
                if not ctx.allowed(READ, TOPIC, t.name):
                    code = ErrorCode.topic_authorization_failed
                elif not partition_exists(broker, t.name, p.partition_index):
                    code = ErrorCode.unknown_topic_or_partition
                elif membership_error != ErrorCode.none:
                    code = membership_error
                elif len(metadata.encode()) > MAX_METADATA:
                    code = ErrorCode.offset_metadata_too_large
                else:
                    accepted[(t.name, p.partition_index)] = CommittedOffset(
                        p.committed_offset, getattr(p, "committed_leader_epoch", -1), metadata, now)
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics_out.append({"name": t.name, "partitions": parts})
    body = {"throttle_time": 0, "topics": topics_out}
    if not accepted:
        return body
    if broker.groups.group(request.group_id) is None and broker.consumer_groups.group(request.group_id) is None:
        broker.groups.group(request.group_id, create=True)
    return answer_when_durable(broker, lambda: broker.offsets.append(request.group_id, accepted), body)


def check_commit(broker, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> None:
    """May this (transactional or plain) offset commit go ahead? The group's own protocol decides:
    a Kafka 4 consumer group checks the member's epoch, a classic group its generation."""
    if broker.consumer_groups.group(group_id) is not None:
        broker.consumer_groups.check_commit(group_id, member_id, generation)
    else:
        broker.groups.check_commit(group_id, member_id, group_instance_id, generation)


COMMIT_TIMEOUT_S = 30.0  # a commit not in the ISR of __consumer_offsets within this: COORDINATOR_NOT_AVAILABLE


def _refuse_accepted(body: dict, code: ErrorCode) -> dict:
    """``body`` with every partition it accepted answered ``code`` instead."""
    for t in body["topics"]:
        for p in t["partitions"]:
            if p["error_code"] == ErrorCode.none:
                p["error_code"] = code
    return body


def answer_when_durable(broker, append, body: dict):
    """The commit's answer once ``append()`` (the write to ``__consumer_offsets``, giving its last offset) is
    durable (``append_failure``: fsync'd, in a cluster once the ISR has it); if the write or that fails, every
    partition that was accepted answers as Kafka's coordinator maps a failed append: NOT_COORDINATOR when the log
    failed on disk or this broker stopped leading the partition meanwhile (the write may be cut from the log: the
    client finds the new coordinator and commits again)."""
    try:
        last_offset = append()
    except StorageError as exc:
        return _refuse_accepted(body, failed_append_code(exc))
    broker.group_commit.written(broker.offsets.partition)

    async def when_durable() -> dict:
        code = await append_failure(broker, OFFSETS_TOPIC, broker.offsets.partition, last_offset, COMMIT_TIMEOUT_S)
        return body if code is None else _refuse_accepted(body, code)

    return when_durable()


def _fetch_group(ctx: RequestContext, group_id: str, topics, require_stable: bool = False) -> tuple[list[dict], int]:
    broker = ctx.broker
    if not ctx.allowed(DESCRIBE, GROUP, group_id):
        return [], ErrorCode.group_authorization_failed
    if not_coordinator(ctx):
        return [], ErrorCode.not_coordinator
    committed = broker.offsets.committed(group_id)
    out = []
    if topics is None:  # every topic: those this principal may not describe are left out
        by_topic: dict[str, list] = {}
        for (topic, partition), c in sorted(committed.items()):
            if ctx.allowed(DESCRIBE, TOPIC, topic):
                by_topic.setdefault(topic, []).append((partition, c))
        wanted = [(topic, [p for p, _ in parts]) for topic, parts in by_topic.items()]
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    for topic, partitions in wanted:
        parts = []
        if not ctx.allowed(DESCRIBE, TOPIC, topic):
            out.append({"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ErrorCode.topic_authorization_failed} for p in partitions]})
            continue
        for p in partitions:
            c = committed.get((topic, p))
            # KIP-447: a consumer that asks for stable offsets waits while a transaction holds one back
            unstable = require_stable and broker.offsets.has_pending(group_id, topic, p)
            parts.append({"partition_index": p, "committed_offset": c.offset if c else -1,
                          "committed_leader_epoch": c.leader_epoch if c else -1,
                          "metadata": c.metadata if c else "",
                          "error_code": ErrorCode.unstable_offset_commit if unstable else ErrorCode.none})
        out.append({"name": topic, "partitions": parts})
    return out, ErrorCode.none


def offset_fetch(ctx: RequestContext, request: Request) -> dict:
    if hasattr(request, "groups"):
        groups = []
        for g in request.groups:
            topics, code = _fetch_group(ctx, g.group_id, g.topics, getattr(request, "require_stable", False))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    topics, code = _fetch_group(ctx, request.group_id, request.topics, getattr(request, "require_stable", False))
    return {"throttle_time": 0, "topics": topics, "error_code": code}


def _known_groups(broker) -> dict[str, object]:
    """The classic groups: those with members or committed offsets that are not Kafka 4 consumer groups."""
    names = (set(broker.groups.groups) | set(broker.offsets.groups())) - set(broker.consumer_groups.groups)
    return {name: broker.groups.group(name) for name in sorted(names)}


def with_authorized_operations(ctx: RequestContext, request: Request, described: list[dict]) -> list[dict]:
    """The groups described, each answered without error given its authorized operations (KIP-430) when the
    request asks for them (DescribeGroups v3+, ConsumerGroupDescribe, ShareGroupDescribe), as Kafka does."""
    if not getattr(request, "include_authorized_operations", False):
        return described
    return [{**g, "authorized_operations": ctx.authorized_operations(GROUP, g["group_id"])}
            if g["error_code"] == ErrorCode.none else g for g in described]


def describe_groups(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    known = _known_groups(broker)
    out = []
    for group_id in request.groups:
        g = broker.groups.group(group_id)
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        if not_coordinator(ctx):
            out.append({"error_code": ErrorCode.not_coordinator, "group_id": group_id, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        if group_id not in known and (group_id in broker.share_groups.groups
                                      or group_id in broker.consumer_groups.groups):
            # as Kafka: DescribeGroups answers for classic groups only (ConsumerGroupDescribe and
            # ShareGroupDescribe for the rest)
            kind = "share" if group_id in broker.share_groups.groups else "consumer"
            out.append({"error_code": ErrorCode.group_id_not_found,
                        "error_message": f"Group {group_id} is not a classic group ({kind}).",
                        "group_id": group_id, "group_state": DEAD, "protocol_type": "", "protocol_data": "",
                        "members": []})
            continue
        if group_id not in known:
            out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": DEAD, "protocol_type": "",
                        "protocol_data": "", "members": []})
            continue
        state = g.state if g else EMPTY
        members = []
        if g is not None:
            for m in g.members.values():
                members.append({
                    "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "member_metadata": m.metadata_for(g.protocol_name),
                    "member_assignment": m.assignment if state not in (PREPARING, COMPLETING) else b"",
                })
        out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": state,
                    "protocol_type": (g.protocol_type if g and g.protocol_type else "consumer"),
                    "protocol_data": (g.protocol_name or "") if g else "", "members": members})
    return {"throttle_time": 0, "groups": with_authorized_operations(ctx, request, out)}


def list_groups(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    states = set(getattr(request, "states_filter", ()) or ())
    types = {t.lower() for t in (getattr(request, "types_filter", ()) or ())}
    out = []
    if not_coordinator(ctx):  # as a Kafka broker, it lists the groups it coordinates: none
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": out}
    known = _known_groups(broker)
    # a principal that may describe the cluster sees every group, others only those they may describe
    visible = (lambda group_id: True) if ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME) else (
        lambda group_id: ctx.allowed(DESCRIBE, GROUP, group_id))
    for group_id, g in known.items():
        if not visible(group_id):
            continue
        state = g.state if g else EMPTY
        if states and state not in states:
            continue
        if types and "classic" not in types:
            continue
        out.append({"group_id": group_id, "protocol_type": (g.protocol_type if g and g.protocol_type else "consumer"),
                    "group_state": state, "group_type": "classic"})
    for group_id, cg in sorted(broker.consumer_groups.groups.items()):
        if (states and cg.state not in states) or (types and "consumer" not in types) or not visible(group_id):
            continue
        out.append({"group_id": group_id, "protocol_type": "consumer", "group_state": cg.state,
                    "group_type": "consumer"})
    for group_id, sg in sorted(broker.share_groups.groups.items()):
        if group_id in known or (states and sg.state not in states) or (types and "share" not in types) \
                or not visible(group_id):
            continue
        out.append({"group_id": group_id, "protocol_type": "share", "group_state": sg.state, "group_type": "share"})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": out}


def delete_groups(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    results = []
    waits = []
    known = _known_groups(broker)
    later = []  # (result index, coroutine answering its error code): share groups' state in a cluster
    for group_id in request.groups_names:
        code = ErrorCode.none
        if not ctx.allowed(DELETE, GROUP, group_id):
            results.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed})
            continue
        if not_coordinator(ctx):
            results.append({"group_id": group_id, "error_code": ErrorCode.not_coordinator})
            continue
        if group_id in broker.consumer_groups.groups:
            try:
                broker.consumer_groups.delete(group_id)
            except ConsumerGroupError as exc:
                results.append({"group_id": group_id, "error_code": exc.error_code})
                continue
            known[group_id] = None  # its committed offsets go as a classic group's do
        if group_id not in known and group_id in broker.share_groups.groups:
            try:
                if broker.cluster is not None:  # its state at the share coordinator first, then the group
                    later.append((len(results), delete_share_group_in_cluster(ctx, group_id)))
                else:
                    waits.append((broker.share_groups.state, broker.share_groups.delete(group_id)))
            except ShareGroupError as exc:
                code = exc.error_code
            results.append({"group_id": group_id, "error_code": code})
            continue
        if group_id not in known:
            code = ErrorCode.group_id_not_found
        else:
            try:
                broker.groups.delete(group_id)
                committed = broker.offsets.committed(group_id)
                if committed:
                    waits.append((broker.offsets.partition,
                                  broker.offsets.append(group_id, {k: None for k in list(committed)})))
                    broker.group_commit.written(broker.offsets.partition)
            except GroupError as exc:
                code = exc.error_code
        results.append({"group_id": group_id, "error_code": code})
    body = {"throttle_time": 0, "results": results}
    if later:
        async def then() -> dict:
            for i, deleted in later:
                results[i]["error_code"] = await deleted
            return await broker.group_commit.answer_when_durable(body, *waits)
        return then()
    if not waits:
        return body
    return broker.group_commit.answer_when_durable(body, *waits)


def offset_delete(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    group_id = request.group_id
    g = broker.groups.group(group_id)
    if not ctx.allowed(DELETE, GROUP, group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "throttle_time": 0, "topics": []}
    if not_coordinator(ctx):
        return {"error_code": ErrorCode.not_coordinator, "throttle_time": 0, "topics": []}
    if group_id not in _known_groups(broker) and group_id not in broker.consumer_groups.groups:
        return {"error_code": ErrorCode.group_id_not_found, "throttle_time": 0, "topics": []}
    subscribed = broker.consumer_groups.subscribed_by_group(group_id)
    if g is not None:
        for m in g.members.values():
            subscribed |= m.subscribed_topics()
    committed = broker.offsets.committed(group_id)
    deletions = {}
    topics_out = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code = ErrorCode.none
            if not ctx.allowed(READ, TOPIC, t.name):
                code = ErrorCode.topic_authorization_failed
            elif not partition_exists(broker, t.name, p.partition_index):  # KafkaApis asks its metadata first
                code = ErrorCode.unknown_topic_or_partition
            elif t.name in subscribed:
                code = ErrorCode.group_subscribed_to_topic
            elif (t.name, p.partition_index) in committed:
                deletions[(t.name, p.partition_index)] = None
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics_out.append({"name": t.name, "partitions": parts})
    body = {"error_code": ErrorCode.none, "throttle_time": 0, "topics": topics_out}
    if not deletions:
        return body
    last = broker.offsets.append(group_id, deletions)
    broker.group_commit.written(broker.offsets.partition)
    durable = broker.group_commit.durable(broker.offsets.partition, last)

    async def when_durable() -> dict:
        await durable
        return body

    return when_durable()


APIS = {
    10: (0, 6, find_coordinator),
    11: (0, 9, join_group),
    14: (0, 5, sync_group),
    12: (0, 4, heartbeat),
    13: (0, 5, leave_group),
    8: (2, 9, offset_commit),
    9: (1, 9, offset_fetch),
    15: (0, 5, describe_groups),
    16: (0, 5, list_groups),
    42: (0, 2, delete_groups),
    47: (0, 0, offset_delete),
}

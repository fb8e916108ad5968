"""ApiVersions, Metadata and DescribeCluster: what the cluster is and what it speaks."""

from __future__ import annotations

import functools
from kio.schema.errors import ErrorCode

from freshet.format.framing import API_VERSIONS_KEY

from ..cluster import admin
from ..context import Request, RequestContext, Response
from ..security.acls import ALTER, CLUSTER, CLUSTER_NAME, CREATE, DESCRIBE, NO_AUTHORIZED_OPERATIONS, TOPIC
from ..topics.registry import TopicError, check_topic_name
from ..wire import protocol


def api_versions(ctx: RequestContext, request: Request) -> dict:
    name = getattr(request, "client_software_name", None)
    if ctx.connection is not None and name:
        ctx.connection.client_software = f"{name} {getattr(request, 'client_software_version', '')}".strip()
    return {
        "error_code": ErrorCode.none,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high, _) in sorted(ctx.broker.apis.items())
        ],
        "throttle_time": 0,
    }


def unsupported_api_versions(broker, header) -> bytes:
    """Kafka answers an ApiVersions version it does not know in v0, with UNSUPPORTED_VERSION
    and its own ranges, so the client can retry with a version both speak."""
    body = {
        "error_code": ErrorCode.unsupported_version,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high, _) in sorted(broker.apis.items())
        ],
    }
    return protocol.encode_response(API_VERSIONS_KEY, 0, header.correlation_id, body)


def _broker_nodes(ctx: RequestContext, id_field: str) -> list[dict]:
    """This node, at the address of the listener the request came in on."""
    host, port = ctx.broker.advertised(ctx.connection.listener if ctx.connection else None)
    return [{id_field: ctx.broker.config.node_id, "host": host, "port": port, "rack": None}]


def topic_metadata(broker, topic) -> dict:
    node = broker.config.node_id
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for i in range(len(topic.partitions))
        ],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def metadata(ctx: RequestContext, request: Request, created: bool = False) -> Response:
    """Metadata: the brokers, the topics asked for (all those the principal may describe when none are named),
    the controller. In a cluster, from the controllers' metadata (the ``ClusterView``): every live broker, each
    partition's leader, epoch, replicas, ISR and offline replicas, the active controller; a topic to auto-create
    goes to the controller first (``created``: the answer built again after that)."""
    broker = ctx.broker
    view = broker.cluster.view if broker.cluster is not None else None
    if view is not None:
        topics_by_name, by_id = view.topics, view.by_id
        describe = functools.partial(admin.topic_metadata, view)
    else:
        topics_by_name, by_id = broker.registry.topics, broker.registry.by_id.get
        describe = functools.partial(topic_metadata, broker)
    requested = request.topics
    if requested is None or (ctx.version == 0 and not requested):
        # all topics: those this principal may not describe are left out, as Kafka does
        topics = [describe(t) for _, t in sorted(topics_by_name.items()) if ctx.allowed(DESCRIBE, TOPIC, t.name)]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True) and not created
        topics, to_create = [], []
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            by_topic_id = name is None and topic_id is not None
            if by_topic_id:
                topic = by_id(topic_id)
                if topic is None:  # as Kafka: UNKNOWN_TOPIC_ID, the id and no name
                    topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None,
                                   "topic_id": topic_id, "partitions": []})
                    continue
                name = topic.name
            if not ctx.allowed(DESCRIBE, TOPIC, name):
                # asked by id: the id back and no name (Kafka: ids are not secret, a name the caller may not
                # describe is); asked by name: the name and no id
                topics.append({"error_code": ErrorCode.topic_authorization_failed,
                               "name": None if by_topic_id else name,
                               "topic_id": topic_id if by_topic_id else protocol.ZERO_UUID, "partitions": []})
                continue
            topic = topics_by_name.get(name)
            if topic is None:
                try:
                    check_topic_name(name)
                    if not (broker.config.auto_create_topics and allow_create):
                        raise TopicError(ErrorCode.unknown_topic_or_partition, "unknown topic")
                    if not (ctx.allowed(CREATE, CLUSTER, CLUSTER_NAME) or ctx.allowed(CREATE, TOPIC, name)):
                        raise TopicError(ErrorCode.topic_authorization_failed, "not authorized to create topics")
                    if view is not None:
                        to_create.append(name)
                        continue
                    topic = broker.registry.create(name, broker.default_partitions)
                except TopicError as exc:
                    topics.append({"error_code": exc.error_code, "name": name,
                                   "topic_id": protocol.ZERO_UUID, "partitions": []})
                    continue
            topics.append(describe(topic))
        if to_create:
            return _auto_create(ctx, request, to_create)
    if ctx.version >= 8 and getattr(request, "include_topic_authorized_operations", False):
        # as Kafka: for each topic the principal may describe, existing or not (not those refused, nor ids unknown)
        topics = [t if t["name"] is None or t["error_code"] == ErrorCode.topic_authorization_failed
                  else {**t, "topic_authorized_operations": ctx.authorized_operations(TOPIC, t["name"])}
                  for t in topics]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,  # v13+
        "brokers": admin.broker_nodes(view, "node_id") if view else _broker_nodes(ctx, "node_id"),
        "cluster_id": broker.config.cluster_id,
        "controller_id": admin.controller_for_clients(view, broker.config.node_id) if view
        else broker.config.node_id,
        "topics": topics,
        # v8-10 only (v11 left it to DescribeCluster, KIP-700)
        "cluster_authorized_operations": _cluster_operations(ctx) if 8 <= ctx.version <= 10 and getattr(
            request, "include_cluster_authorized_operations", False) else NO_AUTHORIZED_OPERATIONS,
    }


def _cluster_operations(ctx: RequestContext) -> int:
    """The cluster's authorized operations as Kafka answers them: none (0) unless the principal may describe it."""
    return ctx.authorized_operations(CLUSTER, CLUSTER_NAME) if ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME) else 0


async def _auto_create(ctx: RequestContext, request: Request, names: list[str]) -> dict:
    for name in names:
        try:
            await admin.create_topic(ctx.broker, name, -1, -1, {}, validate_only=False)
        except TopicError:
            pass  # already created by someone else, or refused: the answer says what the topic is now
    return metadata(ctx, request, created=True)


def describe_cluster(ctx: RequestContext, request: Request) -> dict:
    """DescribeCluster (KIP-700): the brokers and the controller to anyone, as Kafka answers (Metadata tells as
    much); the cluster's authorized operations when asked (0 to a principal that may not describe it)."""
    broker = ctx.broker
    wanted = getattr(request, "endpoint_type", 1)  # v1+ (KIP-919); v0 asks a broker
    if wanted != 1:  # as Kafka's computeDescribeClusterResponse: a broker answers for brokers only
        code = ErrorCode.mismatched_endpoint_type if wanted == 2 else ErrorCode.unsupported_endpoint_type
        message = ("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
                   if wanted == 2 else f"Unsupported endpoint type {wanted}")
        return {"throttle_time": 0, "error_code": code, "error_message": message, "endpoint_type": 1,
                "cluster_id": broker.config.cluster_id, "controller_id": -1, "brokers": [],
                "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS}
    view = broker.cluster.view if broker.cluster is not None else None
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": broker.config.cluster_id,
        "controller_id": admin.controller_for_clients(view, broker.config.node_id) if view
        else broker.config.node_id,
        "brokers": admin.broker_nodes(view, "broker_id", bool(getattr(request, "include_fenced_brokers", False)))
        if view else _broker_nodes(ctx, "broker_id"),
        "cluster_authorized_operations": _cluster_operations(ctx) if request.include_cluster_authorized_operations
        else NO_AUTHORIZED_OPERATIONS,
    }


MAX_PARTITIONS_PER_DESCRIBE = 2000  # Kafka's max.request.partition.size.limit


def describe_topic_partitions(ctx: RequestContext, request: Request) -> dict:
    """DescribeTopicPartitions (KIP-966; librdkafka's describe_topics prefers it to Metadata): the topics
    asked for (all those the principal may describe when none are named), by name, their partitions from the
    cursor on, at most ``response_partition_limit`` of them (capped at 2000); ``next_cursor`` says where the
    next page starts. A topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION, one not to be described
    TOPIC_AUTHORIZATION_FAILED; neither creates or changes anything. Each topic described carries its authorized
    operations (KIP-430; Kafka's request has no flag for them)."""
    broker = ctx.broker
    view = broker.cluster.view if broker.cluster is not None else None
    topics_by_name = view.topics if view else broker.registry.topics
    if request.topics:
        names = sorted({t.name for t in request.topics})
    else:
        names = sorted(name for name in topics_by_name if ctx.allowed(DESCRIBE, TOPIC, name))
    cursor = request.cursor
    if cursor is not None and ((request.topics and cursor.topic_name not in names) or cursor.partition_index < 0):
        # as Kafka's handler: an InvalidRequestException, INVALID_REQUEST for each topic asked for
        return {"throttle_time": 0, "next_cursor": None, "topics": [
            {"error_code": ErrorCode.invalid_request, "name": t.name, "topic_id": protocol.ZERO_UUID,
             "partitions": [], "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS} for t in request.topics]}
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    limit = min(max(int(request.response_partition_limit), 1), MAX_PARTITIONS_PER_DESCRIBE)
    topics, next_cursor, budget = [], None, limit
    for name in names:
        topic = topics_by_name.get(name)
        if not ctx.allowed(DESCRIBE, TOPIC, name):
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name,
                           "topic_id": protocol.ZERO_UUID, "partitions": [],
                           "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS})
            continue
        if topic is None:  # (its operations as Kafka tells them: what the principal could do once it exists)
            topics.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name,
                           "topic_id": protocol.ZERO_UUID, "partitions": [],
                           "topic_authorized_operations": ctx.authorized_operations(TOPIC, name)})
            continue
        if budget == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        described = admin.topic_metadata(view, topic) if view else topic_metadata(broker, topic)
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions = [p for p in described["partitions"] if p["partition_index"] >= first]
        if len(partitions) > budget:
            next_cursor = {"topic_name": name, "partition_index": partitions[budget]["partition_index"]}
            partitions = partitions[:budget]
        budget -= len(partitions)
        topics.append({**described, "topic_authorized_operations": ctx.authorized_operations(TOPIC, name),
                       "partitions": [{**p, "eligible_leader_replicas": None, "last_known_elr": None}
                                      for p in partitions]})
        if next_cursor is not None:
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}


def elect_leaders(ctx: RequestContext, request: Request) -> Response:
    """ElectLeaders (KIP-460): preferred (the first replica, when it is a live ISR member) or unclean (a live
    replica outside the ISR, only for a partition without a leader), partition by partition through the
    controller; ALTER on the cluster needed. Without ``topic_partitions``, every partition, and those that need
    no election are left out of the answer, as Kafka does. The one-node broker leads every partition already."""
    broker = ctx.broker
    unclean = getattr(request, "election_type", 0) == 1
    view = broker.cluster.view if broker.cluster is not None else None
    counts = ({name: len(t.partitions) for name, t in view.topics.items()} if view is not None
              else {name: len(t.partitions) for name, t in broker.registry.topics.items()})
    every = request.topic_partitions is None
    if every:
        wanted = [(name, p) for name, n in sorted(counts.items()) for p in range(n)]
    else:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return _elected(wanted, {key: ErrorCode.cluster_authorization_failed for key in wanted},
                        ErrorCode.cluster_authorization_failed)
    unknown = {(topic, p): ErrorCode.unknown_topic_or_partition for topic, p in wanted
               if not 0 <= p < counts.get(topic, 0)}
    if view is None:
        codes = {key: unknown.get(key, ErrorCode.election_not_needed) for key in wanted}
        return _elected(wanted, codes, ErrorCode.none, every)

    async def run() -> dict:
        codes, messages, moved = dict(unknown), {}, {}
        for topic, p in wanted:
            if (topic, p) in codes:
                continue
            answer = await broker.cluster.command({"command": "ElectLeaders", "topic": topic, "partition": p,
                                                   "election_type": "unclean" if unclean else "preferred"})
            codes[(topic, p)] = ErrorCode(answer["error_code"])
            messages[(topic, p)] = answer["message"] or None
            if answer["error"] == "NONE":
                moved[(topic, p)] = answer["value"]["leader_epoch"]
        await broker.cluster.wait_for(lambda v: all(
            t in v.topics and v.topics[t].partitions[p].leader_epoch >= epoch for (t, p), epoch in moved.items()))
        return _elected(wanted, codes, ErrorCode.none, every, messages)

    return run()


def _elected(wanted: list[tuple[str, int]], codes: dict, error: ErrorCode, every: bool = False,
             messages: dict | None = None) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for topic, p in wanted:
        code = codes[(topic, p)]
        if every and code == ErrorCode.election_not_needed:
            continue
        by_topic.setdefault(topic, []).append({"partition_id": p, "error_code": code,
                                               "error_message": (messages or {}).get((topic, p))})
    return {"throttle_time": 0, "error_code": error, "replica_election_results": [
        {"topic": topic, "partition_result": results} for topic, results in by_topic.items()]}


APIS = {
    18: (0, 3, api_versions),
    3: (0, 13, metadata),
    60: (0, 2, describe_cluster),
    75: (0, 0, describe_topic_partitions),
    43: (0, 2, elect_leaders),
}

"""The share coordinator's APIs (KIP-932), between brokers: InitializeShareGroupState (83), ReadShareGroupState
(84), WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87).

A share-partition leader sends them to the leader of ``__share_group_state`` (FindCoordinator key type 2) to
persist and read its windows (``cluster.share_persister``); a one-node broker is its own share coordinator. As
Kafka: CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED on every partition otherwise), NOT_COORDINATOR
on a broker of a cluster that does not lead the topic, a partition's errors in its result (INVALID_REQUEST,
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH) with nothing of it written, and a write
answered once the ISR of ``__share_group_state`` has it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..cluster import admin as cluster_admin
from ..cluster.share_persister import acknowledged
from ..context import Request, RequestContext, Response
from ..groups.share import SHARE_STATE_TOPIC, ShareGroupError
from ..groups.share_state import StateError, from_batches, to_batches
from ..security.acls import CLUSTER, CLUSTER_ACTION, CLUSTER_NAME
from ..topics.registry import TopicError


def _topic_names(broker) -> dict:
    """topic id -> (name, partition count), as the cluster's metadata (or the one-node registry) says."""
    if broker.cluster is not None:
        return {t.topic_id: (name, len(t.partitions)) for name, t in broker.cluster.view.topics.items()}
    return {t.topic_id: (t.name, len(t.partitions)) for t in broker.registry.by_id.values()}


def _each(ctx: RequestContext, request: Request, serve, extra: dict):
    """Run ``serve(name, topic_id, partition) -> dict`` for every partition the request names, or answer the
    refusal every partition gets; the results in the request's shape and the records the calls returned."""
    broker = ctx.broker
    refusal = None
    if not ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        refusal = (ErrorCode.cluster_authorization_failed, None)
    elif broker.cluster is not None and broker.share_groups.coordinator_epoch is None:
        refusal = (ErrorCode.not_coordinator, "this broker is not the share coordinator")
    elif not request.group_id:
        refusal = (ErrorCode.invalid_request, "the group id must not be empty")
    names = _topic_names(broker) if refusal is None else {}
    results, records = [], []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition": p.partition, "error_code": ErrorCode.none, "error_message": None, **extra}
            parts.append(entry)
            known = names.get(t.topic_id)
            if refusal is not None:
                entry["error_code"], entry["error_message"] = refusal
            elif known is None or not 0 <= p.partition < known[1]:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    record = serve(known[0], str(t.topic_id), p, entry)
                except StateError as exc:
                    entry["error_code"], entry["error_message"] = exc.error_code, str(exc)
                    continue
                if record is not None:
                    records.append((entry, record))
        results.append({"topic_id": t.topic_id, "partitions": parts})
    return results, records


def _answer_when_written(ctx: RequestContext, body: dict, records: list) -> Response:
    """Append the ``(entry, record)``s and answer once the ISR has them (their entries' error otherwise)."""
    if not records:
        return body
    broker = ctx.broker
    try:
        offset = broker.share_groups.append_state([record for _, record in records])
    except StateError as exc:
        for entry, _ in records:
            entry["error_code"], entry["error_message"] = exc.error_code, str(exc)
        return body

    async def when_written() -> dict:
        try:
            await acknowledged(broker, offset)
        except StateError as exc:
            for entry, _ in records:
                entry["error_code"], entry["error_message"] = exc.error_code, str(exc)
        return body

    return when_written()


def initialize_share_group_state(ctx: RequestContext, request: Request) -> Response:
    store = ctx.broker.share_groups.store

    def serve(name, topic_id, p, entry):
        return store.initialize(request.group_id, name, topic_id, p.partition, p.state_epoch, p.start_offset)

    results, records = _each(ctx, request, serve, {})
    return _answer_when_written(ctx, {"results": results}, records)


def read_share_group_state(ctx: RequestContext, request: Request) -> Response:
    """A read in a newer leader epoch writes that epoch (the next coordinator fences older leaders too): the answer
    then waits for the ISR, as a write's."""
    state = ctx.broker.share_groups.state
    before = state.log_end_offset
    store = ctx.broker.share_groups.store

    def serve(name, topic_id, p, entry):
        value = store.read(request.group_id, name, topic_id, p.partition, p.leader_epoch)
        if value is not None:
            entry.update(state_epoch=int(value.get("state_epoch", 0)), start_offset=int(value["start_offset"]),
                         state_batches=[{"first_offset": f, "last_offset": t, "delivery_state": s, "delivery_count": c}
                                        for f, t, s, c in to_batches(value)])
        return None

    results, _ = _each(ctx, request, serve, {"state_epoch": -1, "start_offset": -1, "state_batches": []})
    body = {"results": results}
    if state.log_end_offset == before:
        return body
    broker, offset = ctx.broker, state.log_end_offset - 1

    async def when_written() -> dict:
        try:
            await acknowledged(broker, offset)
        except StateError as exc:
            for t in results:
                for p in t["partitions"]:
                    if p["error_code"] == ErrorCode.none:
                        p.update(error_code=exc.error_code, error_message=str(exc), state_epoch=-1, start_offset=-1,
                                 state_batches=[])
        return body

    return when_written()


def write_share_group_state(ctx: RequestContext, request: Request) -> Response:
    store = ctx.broker.share_groups.store

    def serve(name, topic_id, p, entry):
        window = from_batches(p.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                               for b in p.state_batches])
        return store.write(request.group_id, name, topic_id, p.partition, p.leader_epoch, p.state_epoch, window)

    results, records = _each(ctx, request, serve, {})
    return _answer_when_written(ctx, {"results": results}, records)


def delete_share_group_state(ctx: RequestContext, request: Request) -> Response:
    store = ctx.broker.share_groups.store

    def serve(name, topic_id, p, entry):
        return store.delete(request.group_id, name, p.partition)

    results, records = _each(ctx, request, serve, {})
    return _answer_when_written(ctx, {"results": results}, records)


def read_share_group_state_summary(ctx: RequestContext, request: Request) -> dict:
    store = ctx.broker.share_groups.store

    def serve(name, topic_id, p, entry):
        value = store.get_partition(request.group_id, name, topic_id, p.partition)
        if value is not None:
            entry.update(state_epoch=int(value.get("state_epoch", 0)), leader_epoch=int(value.get("leader_epoch", -1)),
                         start_offset=int(value["start_offset"]))
        return None

    results, _ = _each(ctx, request, serve, {"state_epoch": -1, "leader_epoch": -1, "start_offset": -1,
                                             "delivery_complete_count": -1})
    return {"results": results}


APIS = {
    83: (0, 0, initialize_share_group_state),
    84: (0, 0, read_share_group_state),
    85: (0, 1, write_share_group_state),
    86: (0, 0, delete_share_group_state),
    87: (0, 1, read_share_group_state_summary),
}


async def delete_share_group_in_cluster(ctx: RequestContext, group_id: str) -> ErrorCode:
    """DeleteGroups of a share group in a cluster, as Kafka's group coordinator: refused while it has members
    (NON_EMPTY_GROUP); its state at the share coordinator deleted first, every partition of the cluster's topics
    (DeleteShareGroupState), its configs from the cluster metadata, then the group; a failed delete answers its
    error and keeps the group, so that a retry deletes it all."""
    share_groups = ctx.broker.share_groups
    group = share_groups.groups.get(group_id)
    if group is None:
        return ErrorCode.group_id_not_found
    if group.members:
        return ErrorCode.non_empty_group
    if group.deleting:  # another DeleteGroups of it is under way: Kafka's coordinator runs them one after the other
        return ErrorCode.coordinator_load_in_progress
    view = ctx.broker.cluster.view
    partitions = {(name, t.topic_id): list(range(len(t.partitions))) for name, t in view.topics.items()
                  if not name.startswith("__")}
    group.deleting = True  # fenced: a joining member is answered COORDINATOR_NOT_AVAILABLE until the delete ends
    try:
        if partitions:
            await share_groups.persister.delete(group_id, partitions)
        if group.members:  # not through ShareGroupHeartbeat (fenced); checked again before the configs go
            return ErrorCode.non_empty_group
        configs = share_groups.configs_of(group_id)
        if configs:
            await cluster_admin.alter_group_configs(ctx.broker, group_id, dict.fromkeys(configs))
        share_groups.delete(group_id)
    except (StateError, ShareGroupError, TopicError) as exc:
        return exc.error_code
    finally:
        group.deleting = False
    return ErrorCode.none


def find_share_coordinator(ctx: RequestContext, request: Request) -> dict:
    """FindCoordinator key type 2 (v6, KIP-932): the share coordinator of ``group:topicId:partition`` keys, the leader
    of ``__share_group_state`` (this broker on one node). CLUSTER_ACTION on the cluster, as Kafka (brokers ask);
    INVALID_REQUEST for a key not of that form or before v6 (as Kafka's getCoordinator)."""
    broker = ctx.broker
    node = None
    if broker.cluster is None:
        host, port = broker.advertised(ctx.connection.listener if ctx.connection else None)
        node = {"node_id": broker.config.node_id, "host": host, "port": port}
    else:
        found = broker.cluster.coordinator(SHARE_STATE_TOPIC)
        if found is not None:
            node = {"node_id": found.node_id, "host": found.host, "port": found.port}
    allowed = ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)

    def answer(key: str) -> dict:
        refusal = {"node_id": -1, "host": "", "port": -1}
        if ctx.header.api_version < 6:
            return {"error_code": ErrorCode.invalid_request, "error_message": "share keys need FindCoordinator v6",
                    **refusal}
        if not allowed:
            return {"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, **refusal}
        group, _, rest = key.rpartition(":")
        group, _, topic_id = group.rpartition(":")
        if not group or not topic_id or not rest.isdigit():
            return {"error_code": ErrorCode.invalid_request,
                    "error_message": f"a share coordinator key is group:topicId:partition, not {key!r}", **refusal}
        if node is None:
            return {"error_code": ErrorCode.coordinator_not_available, "error_message": "no live share coordinator",
                    **refusal}
        return {"error_code": ErrorCode.none, "error_message": None, **node}

    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        return {"throttle_time": 0, **answer(request.key)}
    return {"throttle_time": 0, "coordinators": [{"key": key, **answer(key)} for key in keys]}

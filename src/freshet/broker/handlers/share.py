"""Share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge and the
share-group offset admin APIs. The queue semantics live in ``share_partition``, membership and sessions
in ``share_groups``; these functions turn requests into calls on them and answers into Kafka's shapes."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time

from kio.schema.errors import ErrorCode

from ..context import Request, RequestContext, Response
from ..groups.share import ShareGroup, ShareGroupError, ShareMember
from ..groups.share_partition import AcknowledgeError
from ..groups.share_state import StateError
from ..security.acls import DELETE, DESCRIBE, GROUP, READ, TOPIC
from .consumer_groups import group_kind
from .groups import not_coordinator, with_authorized_operations

ASSIGNOR = "simple"
log = logging.getLogger(__name__)


def _member(ctx: RequestContext, group_id: str | None, member_id: str | None):
    """The member a ShareFetch / ShareAcknowledge names. In a cluster its heartbeats go to the group's coordinator
    and its fetches to each partition's leader (the share-partition leader, KIP-932): a leader that is not the
    coordinator takes a member it does not know on its first request (as Kafka's share-partition leaders key
    their share sessions by group and member without asking the coordinator); it leaves, its records coming
    back, once it stops fetching here for the group's session timeout."""
    coordinator = ctx.broker.share_groups
    try:
        return coordinator.member(group_id, member_id)
    except ShareGroupError as exc:
        cluster = ctx.broker.cluster
        found = cluster.coordinator() if cluster is not None else None
        if exc.error_code != ErrorCode.unknown_member_id or cluster is None or not member_id \
                or (found is not None and found.node_id == ctx.broker.config.node_id):
            raise
    group = coordinator.group(group_id, create=True)
    group.members[member_id] = ShareMember(member_id, 0, ctx.header.client_id or "", ctx.peer_host.lstrip("/"),
                                           None, ())
    return coordinator.member(group_id, member_id)


def _not_led(ctx: RequestContext, name: str, index: int) -> bool:
    """In a cluster: a partition this broker does not lead (its share-partition leader is the partition's)."""
    replicas = ctx.broker.replicas
    return replicas is not None and replicas.check(name, index)[1] is None and replicas.role(name, index) is not None


def _leader(ctx: RequestContext) -> dict:
    return {"leader_id": ctx.broker.config.node_id, "leader_epoch": 0}


def share_group_heartbeat(ctx: RequestContext, request: Request) -> dict:
    coordinator = ctx.broker.share_groups
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "member_epoch": -1,
                "heartbeat_interval": 0}
    if not_coordinator(ctx):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "member_epoch": -1,
                "heartbeat_interval": 0}
    if group_kind(ctx.broker, request.group_id) in ("classic", "consumer"):
        return {"throttle_time": 0, "error_code": ErrorCode.inconsistent_group_protocol,
                "error_message": f"{request.group_id} is a consumer group, not a share group",
                "member_epoch": -1, "heartbeat_interval": 0}
    try:
        result = coordinator.heartbeat(
            request.group_id, request.member_id, request.member_epoch, request.subscribed_topic_names,
            request.rack_id, ctx.header.client_id or "", ctx.peer_host.lstrip("/"))
    except ShareGroupError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code, "error_message": str(exc), "member_epoch": -1,
                "heartbeat_interval": 0}
    assignment = result["assignment"]
    if assignment is not None:
        topics = coordinator.topics  # the cluster's metadata in a cluster, not only this broker's replicas
        found = {name: (topics.get(name), parts) for name, parts in assignment.items()}
        assignment = {"topic_partitions": [{"topic_id": topic.topic_id, "partitions": list(parts)}
                                           for topic, parts in found.values() if topic is not None]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "member_id": result["member_id"],
            "member_epoch": result["member_epoch"],
            "heartbeat_interval": coordinator.heartbeat_interval_ms(request.group_id), "assignment": assignment}


def share_group_describe(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    out = []
    for group_id in request.group_ids:
        group = broker.share_groups.groups.get(group_id)
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id, "group_state": "",
                        "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []})
            continue
        if not_coordinator(ctx):
            out.append({"error_code": ErrorCode.not_coordinator, "group_id": group_id, "group_state": "",
                        "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []})
            continue
        if group is None:
            classic = group_kind(broker, group_id) in ("classic", "consumer")
            out.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id,
                        "error_message": f"group {group_id} is {'not a share group' if classic else 'not known'}",
                        "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                        "members": []})
            continue
        members = []
        for m in group.members.values():
            parts = []
            for name, indexes in (m.sent_assignment or {}).items():
                topic = broker.share_groups.topics.get(name)
                if topic is not None:
                    parts.append({"topic_id": topic.topic_id, "topic_name": name, "partitions": list(indexes)})
            members.append({"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": list(m.subscribed), "assignment": {"topic_partitions": parts}})
        out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state,
                    "group_epoch": group.epoch, "assignment_epoch": group.epoch, "assignor_name": ASSIGNOR,
                    "members": members})
    return {"throttle_time": 0, "groups": with_authorized_operations(ctx, request, out)}


# -- ShareFetch / ShareAcknowledge ------------------------------------------------------------

def _acknowledge(ctx: RequestContext, group: ShareGroup, member_id: str, topics) -> tuple[dict, set]:
    """Apply each partition's acknowledgements (all or nothing per partition): {(topic_id, p): error}, changed."""
    broker = ctx.broker
    coordinator = broker.share_groups
    limit = coordinator.setting(group, "delivery_count_limit")
    lock_ms = coordinator.setting(group, "record_lock_duration_ms")
    now = time.monotonic()
    results: dict[tuple, tuple[ErrorCode, str | None]] = {}
    changed: set[tuple[str, int]] = set()
    for t in topics:
        topic = broker.registry.by_id.get(t.topic_id)
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches]
            if not batches:
                continue
            key = (t.topic_id, p.partition_index)
            if topic is None:
                results[key] = (ErrorCode.unknown_topic_id, None)
                continue
            if not ctx.allowed(READ, TOPIC, topic.name):
                results[key] = (ErrorCode.topic_authorization_failed, None)
                continue
            if _not_led(ctx, topic.name, p.partition_index):
                results[key] = (ErrorCode.not_leader_or_follower, None)
                continue
            sp = coordinator.existing_partition(group, topic.name, p.partition_index)
            if sp is None:
                code = (ErrorCode.unknown_topic_or_partition
                        if broker.registry.partition(topic.name, p.partition_index) is None
                        else ErrorCode.invalid_record_state)
                results[key] = (code, None)
                continue
            try:
                sp.acknowledge(member_id, batches, limit, lock_ms, now)
            except AcknowledgeError as exc:
                results[key] = (exc.error_code, str(exc))
                continue
            results[key] = (ErrorCode.none, None)
            changed.add((topic.name, p.partition_index))
    return results, changed


def _when_durable(ctx: RequestContext, group: ShareGroup, changed: set, body: dict, on_failure,
                  acquired: frozenset | set = frozenset()) -> Response:
    """Persist the share-partitions acknowledgements (or an offset reset) ``changed``, and those ``acquired`` records
    changed; the answer leaves once the ``changed`` ones are fsync'd (in a cluster: in the ISR of the share
    coordinator's ``__share_group_state``); acquisitions are written, not waited on: a crash only makes them
    available again. ``on_failure(body, code)``: COORDINATOR_NOT_AVAILABLE, or NOT_LEADER_OR_FOLLOWER when a newer
    leader of the partition fenced this broker's write."""
    if not changed and not acquired:
        return body
    broker = ctx.broker
    coordinator = broker.share_groups
    last = coordinator.write_partitions(group, sorted(changed | set(acquired)))
    if not changed:
        return body
    coordinator.wake()  # released records may be waiting for a long-polling fetch
    durable = (coordinator.replicated(last) if coordinator.clustered
               else broker.group_commit.durable(coordinator.state, last))

    async def run() -> dict:
        try:
            await durable
        except StateError as exc:
            on_failure(body, ErrorCode.not_leader_or_follower if exc.error_code == ErrorCode.fenced_leader_epoch
                       else ErrorCode.coordinator_not_available)
        except Exception:
            on_failure(body, ErrorCode.coordinator_not_available)
        return body

    return run()


def _error_response(code: ErrorCode, message: str, fetch: bool) -> dict:
    body = {"throttle_time": 0, "error_code": code, "error_message": message, "responses": [], "node_endpoints": []}
    if fetch:
        body["acquisition_lock_timeout"] = 0
    return body


def share_fetch(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    coordinator = broker.share_groups
    epoch = request.share_session_epoch
    if not ctx.allowed(READ, GROUP, request.group_id or ""):
        return _error_response(ErrorCode.group_authorization_failed, "", fetch=True)
    if epoch == 0 and any(p.acknowledgement_batches for t in request.topics for p in t.partitions):
        # acknowledgements cannot ride on a request that opens a session (nothing is acquired in it)
        return _error_response(ErrorCode.invalid_request, "acknowledgements in a session-opening ShareFetch", True)
    try:
        group, member = _member(ctx, request.group_id, request.member_id)
        session = coordinator.session(group, member.member_id, epoch, opening_allowed=True)
    except ShareGroupError as exc:
        return _error_response(exc.error_code, str(exc), fetch=True)
    ack_results, changed = _acknowledge(ctx, group, member.member_id, request.topics)
    if epoch == -1:
        coordinator.close_session(group, member.member_id)
    else:
        registry = broker.registry
        for t in request.topics:
            topic = registry.by_id.get(t.topic_id)
            for p in t.partitions:
                if topic is not None:
                    session.partitions.add((topic.name, p.partition_index))
                elif (t.topic_id, p.partition_index) not in ack_results:
                    ack_results[(t.topic_id, p.partition_index)] = (ErrorCode.none, None)
        for t in request.forgotten_topics_data:
            topic = registry.by_id.get(t.topic_id)
            if topic is not None:
                for index in t.partitions:
                    session.partitions.discard((topic.name, index))
    lock_ms = coordinator.setting(group, "record_lock_duration_ms")
    read_committed = coordinator.setting(group, "isolation_level") == "read_committed"
    unknown_ids = {t.topic_id for t in request.topics if broker.registry.by_id.get(t.topic_id) is None}
    max_records = max(0, request.max_records)
    acquired: set[tuple[str, int]] = set()

    def read() -> tuple[dict, bool]:
        by_topic: dict = {}
        acquired_any = False
        for (topic_id, index), (code, message) in ack_results.items():
            entry = _partition_entry(by_topic, topic_id, index, ctx)
            if topic_id in unknown_ids:
                entry["error_code"] = ErrorCode.unknown_topic_id
            else:
                entry["acknowledge_error_code"] = int(code)
                entry["acknowledge_error_message"] = message
        if epoch != -1 and max_records:
            budget = request.max_bytes if request.max_bytes > 0 else 1 << 30
            records_left = max_records  # max_records holds for the whole request, as Kafka's does
            now = time.monotonic()
            partitions = sorted(session.partitions)
            if partitions:  # each request starts at the next partition: none is always served last
                session.rotation = (session.rotation + 1) % len(partitions)
                partitions = partitions[session.rotation:] + partitions[:session.rotation]
            for name, index in partitions:
                topic = broker.registry.get(name)
                if topic is None:
                    continue
                if not ctx.allowed(READ, TOPIC, name):
                    entry = _partition_entry(by_topic, topic.topic_id, index, ctx)
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                    continue
                if _not_led(ctx, name, index):
                    entry = _partition_entry(by_topic, topic.topic_id, index, ctx)
                    entry["error_code"] = ErrorCode.not_leader_or_follower
                    continue
                sp = coordinator.share_partition(group, name, index)
                if sp is None and coordinator.clustered:
                    continue  # not loaded from the share coordinator (it moves): the next fetch loads it
                if sp is None:
                    entry = _partition_entry(by_topic, topic.topic_id, index, ctx)
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                ranges, data = sp.acquire(member.member_id, records_left, budget, lock_ms,
                                          coordinator.settings.max_record_locks,
                                          coordinator.upper(group, sp.log), now, read_committed)
                if not ranges:
                    continue
                acquired_any = True
                acquired.add((name, index))
                entry = _partition_entry(by_topic, topic.topic_id, index, ctx)
                entry["records"] = data
                entry["acquired_records"] = [
                    {"first_offset": r.first_offset, "last_offset": r.last_offset, "delivery_count": r.delivery_count}
                    for r in ranges]
                budget -= len(data)
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
                if budget <= 0 or records_left <= 0:
                    break
        body = {"throttle_time": 0, "error_code": ErrorCode.none, "acquisition_lock_timeout": lock_ms,
                "responses": [{"topic_id": tid, "partitions": list(parts.values())} for tid, parts in by_topic.items()],
                "node_endpoints": []}
        return body, acquired_any

    def fail_acks(body: dict, code: ErrorCode) -> None:
        for t in body["responses"]:
            for p in t["partitions"]:
                if p.get("acknowledge_error_code") == 0 and (t["topic_id"], p["partition_index"]) in ack_results:
                    p["acknowledge_error_code"] = int(code)

    answered = bool(ack_results)
    missing = coordinator.to_load(group, session.partitions, recheck=epoch == 0) if epoch != -1 and max_records \
        else []
    if missing:  # a cluster's partition this broker has just come to lead: its window from the share coordinator
        async def loaded() -> dict:
            try:
                await coordinator.load(group, missing)
            except StateError as exc:
                log.info("share group %s: %s not loaded: %s", group.group_id, missing, exc)
            result = _answer(ctx, request, group, member, session, read, changed, fail_acks, acquired, answered)
            return await result if inspect.isawaitable(result) else result

        return loaded()
    return _answer(ctx, request, group, member, session, read, changed, fail_acks, acquired, answered)


def _answer(ctx: RequestContext, request: Request, group: ShareGroup, member: ShareMember, session, read,
            changed: set, fail_acks, acquired: set, answered_acks: bool) -> Response:
    """ShareFetch's answer: what ``read`` acquires now, else a long poll until records come or ``max_wait``."""
    broker = ctx.broker
    coordinator = broker.share_groups
    epoch = request.share_session_epoch
    max_records = max(0, request.max_records)
    body, acquired_any = read()
    max_wait_s = request.max_wait.total_seconds()
    if acquired_any or answered_acks or epoch == -1 or not max_records or max_wait_s <= 0:
        return _when_durable(ctx, group, changed, body, fail_acks, acquired)

    def wake_ups() -> list:
        return [broker.group_commit.high_watermark_moved(), coordinator.records_available()]

    waiters = wake_ups()  # in the step that read, as Fetch's: a round before the coroutine runs still wakes it

    async def long_poll() -> dict:
        nonlocal waiters
        deadline = time.monotonic() + max_wait_s
        result, got = body, False
        while not got:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or member.member_id not in group.members:
                break
            done, pending = await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for fut in pending:
                fut.cancel()
            if not done:
                break
            if member.member_id not in group.members or group.sessions.get(member.member_id) is not session:
                break
            waiters = wake_ups()
            result, got = read()
        for fut in waiters:
            fut.cancel()
        if acquired:  # a long poll carries no acknowledgements: nothing to wait for
            coordinator.write_partitions(group, sorted(acquired))
        return result

    return long_poll()


def _partition_entry(by_topic: dict, topic_id, index: int, ctx: RequestContext) -> dict:
    parts = by_topic.setdefault(topic_id, {})
    entry = parts.get(index)
    if entry is None:
        entry = parts[index] = {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                                "acknowledge_error_code": 0, "acknowledge_error_message": None,
                                "current_leader": _leader(ctx), "records": b"", "acquired_records": []}
    return entry


def share_acknowledge(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    coordinator = broker.share_groups
    if not ctx.allowed(READ, GROUP, request.group_id or ""):
        return _error_response(ErrorCode.group_authorization_failed, "", fetch=False)
    try:
        group, member = _member(ctx, request.group_id, request.member_id)
        coordinator.session(group, member.member_id, request.share_session_epoch, opening_allowed=False)
    except ShareGroupError as exc:
        return _error_response(exc.error_code, str(exc), fetch=False)
    results, changed = _acknowledge(ctx, group, member.member_id, request.topics)
    if request.share_session_epoch == -1:
        coordinator.close_session(group, member.member_id)
    by_topic: dict = {}
    for (topic_id, index), (code, message) in results.items():
        by_topic.setdefault(topic_id, []).append({"partition_index": index, "error_code": code,
                                                  "error_message": message, "current_leader": _leader(ctx)})
    body = {"throttle_time": 0, "error_code": ErrorCode.none,
            "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()],
            "node_endpoints": []}

    def fail(body: dict, code: ErrorCode) -> None:
        for t in body["responses"]:
            for p in t["partitions"]:
                if p["error_code"] == ErrorCode.none:
                    p["error_code"] = code

    return _when_durable(ctx, group, changed, body, fail)


# -- share-group offsets (admin) -----------------------------------------------------------------

def describe_share_group_offsets(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    if broker.cluster is not None:
        return _describe_offsets_in_cluster(ctx, request)
    groups_out = []
    for g in request.groups:
        group = broker.share_groups.groups.get(g.group_id)
        if not ctx.allowed(DESCRIBE, GROUP, g.group_id):
            groups_out.append(_group_error(g.group_id, ErrorCode.group_authorization_failed))
            continue
        if group is None:
            groups_out.append(_group_error(g.group_id, ErrorCode.group_id_not_found,
                                           f"share group {g.group_id} is not known"))
            continue
        if g.topics is None:
            wanted: dict[str, list[int]] = {}
            for (name, index) in sorted(group.partitions):
                wanted.setdefault(name, []).append(index)
            wanted_list = list(wanted.items())
        else:
            wanted_list = [(t.topic_name, list(t.partitions)) for t in g.topics]
        topics_out = []
        for name, indexes in wanted_list:
            topic = broker.registry.get(name)
            parts = []
            for index in indexes:
                entry = {"partition_index": index, "start_offset": -1, "leader_epoch": 0,
                         "error_code": ErrorCode.none}
                if topic is None or broker.registry.partition(name, index) is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                elif (sp := broker.share_groups.existing_partition(group, name, index)) is not None:
                    entry["start_offset"] = sp.start_offset
                parts.append(entry)
            topics_out.append({"topic_name": name, "topic_id": topic.topic_id if topic else None, "partitions": parts})
        groups_out.append({"group_id": g.group_id, "topics": topics_out, "error_code": ErrorCode.none})
    return {"throttle_time": 0, "groups": groups_out}


def _group_error(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"group_id": group_id, "topics": [], "error_code": code, "error_message": message}


async def _describe_offsets_in_cluster(ctx: RequestContext, request: Request) -> dict:
    """DescribeShareGroupOffsets in a cluster: the start offsets the share coordinator holds (each partition's
    leader keeps them there), asked with ReadShareGroupStateSummary; every partition of the cluster's topics when
    the request names none (those the group has a window of answered). GROUP_ID_NOT_FOUND for a group neither this
    broker nor the coordinator knows, COORDINATOR_NOT_AVAILABLE while there is no share coordinator."""
    broker = ctx.broker
    view = broker.cluster.view
    groups_out = []
    for g in request.groups:
        if not ctx.allowed(DESCRIBE, GROUP, g.group_id):
            groups_out.append(_group_error(g.group_id, ErrorCode.group_authorization_failed))
            continue
        named = g.topics is not None
        wanted = ([(t.topic_name, list(t.partitions)) for t in g.topics] if named else
                  [(name, list(range(len(t.partitions)))) for name, t in sorted(view.topics.items())
                   if not name.startswith("__")])
        asked = {(name, view.topics[name].topic_id): [i for i in indexes if 0 <= i < len(view.topics[name].partitions)]
                 for name, indexes in wanted if name in view.topics}
        try:
            found = await broker.share_groups.persister.summary(g.group_id, asked) if asked else {}
        except StateError as exc:
            groups_out.append(_group_error(g.group_id, ErrorCode.coordinator_not_available, str(exc)))
            continue
        if not found and broker.share_groups.groups.get(g.group_id) is None:
            groups_out.append(_group_error(g.group_id, ErrorCode.group_id_not_found,
                                           f"share group {g.group_id} is not known"))
            continue
        topics_out = []
        for name, indexes in wanted:
            info = view.topics.get(name)
            parts = []
            for index in indexes:
                if not named and (name, index) not in found:
                    continue
                entry = {"partition_index": index, "start_offset": found.get((name, index), -1), "leader_epoch": 0,
                         "error_code": ErrorCode.none}
                if info is None or not 0 <= index < len(info.partitions):
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                parts.append(entry)
            if parts:
                topics_out.append({"topic_name": name, "topic_id": info.topic_id if info else None,
                                   "partitions": parts})
        groups_out.append({"group_id": g.group_id, "topics": topics_out, "error_code": ErrorCode.none})
    return {"throttle_time": 0, "groups": groups_out}


def _empty_share_group(ctx: RequestContext, group_id: str, operation: int) -> tuple[ShareGroup | None, dict | None]:
    """The share group whose offsets Alter/DeleteShareGroupOffsets change, or the answer refusing it: the
    principal may not, the group is not known, or it has members (offsets change only while it is empty)."""
    group = ctx.broker.share_groups.groups.get(group_id)
    if not ctx.allowed(operation, GROUP, group_id):
        code, message = ErrorCode.group_authorization_failed, None
    elif not_coordinator(ctx):  # a cluster's groups are its group coordinator's
        code, message = ErrorCode.not_coordinator, None
    elif group is None:
        code, message = ErrorCode.group_id_not_found, f"share group {group_id} is not known"
    elif group.members:
        code, message = ErrorCode.non_empty_group, "a share group's offsets change only while it has no members"
    else:
        return group, None
    return None, {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}


def _change_offsets(ctx: RequestContext, request: Request, operation: int, in_cluster, here) -> Response:
    """Alter/DeleteShareGroupOffsets: refused (``_empty_share_group``), or done ``in_cluster`` through the share
    coordinator, or ``here`` on one node."""
    group, refusal = _empty_share_group(ctx, request.group_id, operation)
    if refusal is not None:
        return refusal
    assert group is not None
    return (in_cluster if ctx.broker.cluster is not None else here)(ctx, request, group)


def _alter_plan(broker, request: Request) -> tuple[list, list]:
    """AlterShareGroupOffsets checked: each topic's answer, and (topic, topic id, index, start offset) of the
    partitions to reset (-1: the high watermark; never below the log start), as this broker's replica says (in a
    cluster, a partition without a replica here takes the offset as asked: its leader starts there)."""
    plan, responses = [], []
    view = broker.cluster.view if broker.cluster is not None else None
    for t in request.topics:
        topic = broker.registry.get(t.topic_name) or (view.topics.get(t.topic_name) if view is not None else None)
        parts = []
        for p in t.partitions:
            code, message = ErrorCode.none, None
            log_partition = broker.registry.partition(t.topic_name, p.partition_index)
            if log_partition is None and topic is not None and view is not None \
                    and 0 <= p.partition_index < len(getattr(view.topics.get(t.topic_name), "partitions", ())):
                if p.start_offset < 0:
                    code, message = ErrorCode.invalid_request, "no replica here to take the latest offset from"
                else:
                    plan.append((t.topic_name, topic.topic_id, p.partition_index, p.start_offset))
            elif log_partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif not 0 <= p.start_offset <= log_partition.high_watermark and p.start_offset != -1:
                code, message = ErrorCode.invalid_request, f"offset {p.start_offset} is outside the partition"
            else:
                offset = p.start_offset if p.start_offset >= 0 else log_partition.high_watermark
                plan.append((t.topic_name, topic.topic_id, p.partition_index,
                             max(offset, log_partition.log_start_offset)))
            parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"topic_name": t.topic_name, "topic_id": topic.topic_id if topic else None,
                          "partitions": parts})
    return responses, plan


def alter_share_group_offsets(ctx: RequestContext, request: Request) -> Response:
    return _change_offsets(ctx, request, READ, _alter_offsets_in_cluster, _alter_offsets_here)


def _alter_offsets_here(ctx: RequestContext, request: Request, group: ShareGroup) -> Response:
    broker = ctx.broker
    coordinator = broker.share_groups
    responses, plan = _alter_plan(broker, request)
    changed = set()
    for name, _, index, offset in plan:
        sp = coordinator.share_partition(group, name, index)
        assert sp is not None
        sp.reset(offset)
        changed.add((name, index))
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "responses": responses}
    return _when_durable(ctx, group, changed, body, lambda b, code: b.update(error_code=code))


async def _alter_offsets_in_cluster(ctx: RequestContext, request: Request, group: ShareGroup) -> dict:
    """AlterShareGroupOffsets in a cluster, as Kafka's group coordinator: the share coordinator initializes each
    share-partition at its new start offset in a new state epoch (InitializeShareGroupState), which fences the
    partitions' leaders holding the old one: their next write is refused FENCED_STATE_EPOCH, a member's next
    session reads the new state. Offsets are checked against this broker's replica of the partition."""
    broker = ctx.broker
    responses, plan = _alter_plan(broker, request)
    starts: dict = {}
    for name, topic_id, index, offset in plan:
        starts.setdefault((name, topic_id), {})[index] = offset
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "responses": responses}
    if starts:
        reset = {(name, i) for (name, _), indexes in starts.items() for i in indexes}
        await _at_share_coordinator(body, group, broker.share_groups.persister.initialize(group.group_id, starts),
                                    reset.__contains__)
    return body


async def _at_share_coordinator(body: dict, group: ShareGroup, change, dropped) -> None:
    """``change`` (the persister's initialize or delete) done: this broker's own windows it changed (``dropped``:
    it leads those partitions too) are read again; else the share coordinator's error in ``body``."""
    try:
        await change
    except StateError as exc:
        body.update(error_code=exc.error_code, error_message=str(exc))
        return
    for key in [k for k in group.partitions if dropped(k)]:
        del group.partitions[key]


def delete_share_group_offsets(ctx: RequestContext, request: Request) -> Response:
    return _change_offsets(ctx, request, DELETE, _delete_offsets_in_cluster, _delete_offsets_here)


def _delete_offsets_here(ctx: RequestContext, request: Request, group: ShareGroup) -> Response:
    broker = ctx.broker
    coordinator = broker.share_groups
    responses = []
    removed = []
    for t in request.topics:
        topic = broker.registry.get(t.topic_name)
        code = ErrorCode.none
        if topic is None:
            code = ErrorCode.unknown_topic_or_partition
        else:
            keys = [k for k in group.partitions if k[0] == t.topic_name]
            removed.extend(keys)
        responses.append({"topic_name": t.topic_name, "topic_id": topic.topic_id if topic else None,
                          "error_code": code})
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "responses": responses}
    if not removed:
        return body
    last = coordinator.forget_partitions(group, removed)
    return broker.group_commit.answer_when_durable(body, (coordinator.state, last))


async def _delete_offsets_in_cluster(ctx: RequestContext, request: Request, group: ShareGroup) -> dict:
    """DeleteShareGroupOffsets in a cluster: the share coordinator deletes the state of every partition of each
    topic (DeleteShareGroupState); a leader's window of them is then read again (nothing: started afresh by
    share.auto.offset.reset) when a member opens a session, or once its next write is fenced."""
    broker = ctx.broker
    responses, partitions = [], {}
    for t in request.topics:
        topic = broker.cluster.view.topics.get(t.topic_name)
        if topic is not None:
            partitions[(t.topic_name, topic.topic_id)] = list(range(len(topic.partitions)))
        responses.append({"topic_name": t.topic_name, "topic_id": topic.topic_id if topic else None,
                          "error_code": ErrorCode.none if topic is not None else ErrorCode.unknown_topic_or_partition})
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "responses": responses}
    if partitions:
        names = {name for name, _ in partitions}
        await _at_share_coordinator(body, group, broker.share_groups.persister.delete(group.group_id, partitions),
                                    lambda key: key[0] in names)
    return body


APIS = {
    76: (1, 1, share_group_heartbeat),
    77: (1, 1, share_group_describe),
    78: (1, 2, share_fetch),
    79: (1, 2, share_acknowledge),
    90: (0, 1, describe_share_group_offsets),
    91: (0, 0, alter_share_group_offsets),
    92: (0, 0, delete_share_group_offsets),
}

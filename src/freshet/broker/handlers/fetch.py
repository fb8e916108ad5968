"""Fetch (with long-poll) and ListOffsets: reading the log."""

from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from freshet.log import OffsetOutOfRangeError

from ..context import Request, RequestContext, Response
from ..replication.read_replica import preferred_read_replica, reads_as_follower
from ..security.acls import CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, DESCRIBE, READ, TOPIC
from ..wire.protocol import ZERO_UUID

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
INVALID_SESSION_ID = 0


def replica_id_of(request) -> int:
    """The fetching broker's node id (a follower), or -1 (a consumer): ``replica_id`` before v15, KIP-903's
    ``replica_state`` from v15."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(request, "replica_id", -1)


def _read_all(ctx, request, first: bool = True) -> tuple[dict, int, bool]:
    """One pass over the requested partitions: (response body, record bytes, any error). ``first``: the pass
    that answers the request as it came (a follower's progress counts once, not at every long-poll wake-up)."""
    registry = ctx.broker.registry
    replicas = ctx.broker.replicas  # None: one node, no replication
    replica_id = replica_id_of(request) if replicas is not None else -1
    hinted: set[int] | None = None
    max_bytes = request.max_bytes if request.max_bytes > 0 else 1 << 31
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    total = 0
    any_error = False
    responses = []
    # a follower's fetch needs CLUSTER_ACTION on the cluster (not READ on the topics); without it every partition
    # is TOPIC_AUTHORIZATION_FAILED and nothing of the leader's state moves, as Kafka answers it
    replica_denied = replica_id >= 0 and not ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    for t in request.topics:
        partitions = []
        name = getattr(t, "topic", None)
        unknown_id = False
        if name is None:  # v13+: the topic named by its id
            topic = registry.by_id.get(t.topic_id)
            name, unknown_id = (topic.name, False) if topic is not None else ("", True)
        denied = replica_denied if replica_id >= 0 else not unknown_id and not ctx.allowed(READ, TOPIC, name)
        for p in t.partitions:
            entry = {"partition_index": p.partition, "error_code": ErrorCode.none, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": [] if read_committed else None,
                     "preferred_read_replica": -1, "records": b""}
            partitions.append(entry)
            if unknown_id:
                entry["error_code"] = ErrorCode.unknown_topic_id
                any_error = True
                continue
            if denied:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                any_error = True
                continue
            partition = registry.partition(name, p.partition)
            if partition is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                if replicas is not None and replicas.role(name, p.partition) is not None:
                    # in the cluster's metadata, no replica here (moved away): as Kafka, not "unknown"
                    entry["error_code"] = ErrorCode.not_leader_or_follower
                    entry["current_leader"] = current = replicas.current_leader(name, p.partition)
                    hinted = hinted or set()
                    if current["leader_id"] >= 0:
                        hinted.add(current["leader_id"])
                any_error = True
                continue
            replica_fetch = False
            if replicas is not None:
                code, leader = replicas.check(name, p.partition, getattr(p, "current_leader_epoch", -1))
                if code == ErrorCode.not_leader_or_follower and replica_id < 0 and reads_as_follower(
                        replicas, name, p.partition, ctx.header.api_version):
                    code = None  # KIP-392: a consumer reads this follower, up to its high watermark
                if code is None and replica_id >= 0:
                    if leader is None:
                        code = ErrorCode.not_leader_or_follower  # not a replicated partition
                    elif first:
                        code = leader.follower_fetched(replica_id, p.fetch_offset)
                    replica_fetch = True
                if code is not None:
                    entry["error_code"] = code
                    any_error = True
                    if code == ErrorCode.not_leader_or_follower or code == ErrorCode.fenced_leader_epoch:
                        entry["current_leader"] = current = replicas.current_leader(name, p.partition)
                        hinted = hinted or set()
                        if current["leader_id"] >= 0:
                            hinted.add(current["leader_id"])
                    if code == ErrorCode.offset_out_of_range:  # a follower past our end: it must truncate
                        entry.update(high_watermark=partition.high_watermark,
                                     log_start_offset=partition.log_start_offset)
                    continue
            hw = partition.high_watermark
            lso = partition.last_stable_offset
            entry.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=partition.log_start_offset)
            if replicas is not None and leader is not None and replica_id < 0 and getattr(request, "rack_id", ""):
                preferred = preferred_read_replica(replicas, leader, request.rack_id, p.fetch_offset)
                if preferred >= 0:  # KIP-392: read from that replica, in the consumer's rack; answered at once
                    entry["preferred_read_replica"] = preferred
                    any_error = True
                    continue
            remaining = max_bytes - total
            if remaining <= 0:
                continue
            if replica_fetch and replicas.hold_for_follower(leader, replica_id):
                continue  # leader.replication.throttled.rate reached: nothing for this replica this time
            upper = lso if read_committed else hw
            written = hw
            if replicas is not None:
                # a new leader's high watermark may lag a position its predecessor gave out: nothing there yet
                # (as Kafka: only past the log end is out of range)
                written = partition.log_end_offset
                if replica_fetch:
                    upper = written  # a follower reads what is written, not only what is committed
            if upper < p.fetch_offset <= written:
                continue  # past what this reader may see yet: nothing until the transaction ends
            try:
                region = partition.read_region(p.fetch_offset, min(p.partition_max_bytes, remaining), upper)
            except OffsetOutOfRangeError:
                entry["error_code"] = ErrorCode.offset_out_of_range
                any_error = True
                continue
            if region is None:
                continue
            if total and region.size > remaining:
                region.close()
                continue  # only the very first batch may exceed max_bytes
            entry["records"] = region  # sent from the file by the connection (os.sendfile), never read here
            total += region.size
            if replica_fetch:
                replicas.sent_to_follower(leader, replica_id, region.size)
            if read_committed:
                entry["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in partition.aborted_transactions(p.fetch_offset, upper)]
        # kio reads the zero UUID as None: answered as the unknown id it is, not echoed back as None
        responses.append({"topic": name, "topic_id": getattr(t, "topic_id", None) or ZERO_UUID,
                          "partitions": partitions})
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": INVALID_SESSION_ID,
            "responses": responses}
    if hinted is not None:
        _with_hints(body, replicas, hinted)
    return body, total, any_error


def _with_hints(body: dict, replicas, leaders: set[int]) -> None:
    """KIP-951: the endpoints of the leaders named in partitions' current_leader (Fetch v16+). Such a response
    is written by kio's encoder (the fast one writes no tagged fields): its record sets are read into bytes."""
    body["node_endpoints"] = replicas.node_endpoints(leaders)
    for topic in body["responses"]:
        for entry in topic["partitions"]:
            region = entry["records"]
            if not isinstance(region, bytes):
                entry["records"] = region.read()
                region.close()


def fetch(ctx: RequestContext, request: Request) -> Response:
    if getattr(request, "session_id", 0) != INVALID_SESSION_ID:
        return {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": []}
    body, total, any_error = _read_all(ctx, request)
    max_wait_s = request.max_wait.total_seconds()
    if total >= request.min_bytes or any_error or max_wait_s <= 0:
        return _throttled(ctx, body, total)

    # The wait is registered now, in the step that read: the coroutine below first runs on a later turn of
    # the event loop, and a group-commit round that ends before then (a write, a transaction marker moving the
    # last stable offset) would otherwise wake nobody and the fetch would sit out its whole max_wait.
    commit_log = ctx.broker.group_commit
    moved = commit_log.high_watermark_moved()

    async def long_poll() -> dict:
        nonlocal moved
        deadline = time.monotonic() + max_wait_s
        result, sent = body, total
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _throttled(ctx, result, sent)
                try:
                    await asyncio.wait_for(moved, remaining)
                except asyncio.TimeoutError:
                    return _throttled(ctx, result, sent)
                moved = commit_log.high_watermark_moved()  # before the read, in the same step: no round between
                result, sent, any_error = _read_all(ctx, request, first=False)
                if sent >= request.min_bytes or any_error:
                    return _throttled(ctx, result, sent)
        finally:
            moved.cancel()  # however the wait ends, its future leaves the group commit's listeners

    return long_poll()


def _throttled(ctx: RequestContext, body: dict, total: int) -> dict:
    """The bytes a fetch sends count against the consumer's ``consumer_byte_rate`` quota (KIP-219: answered at
    once with the throttle time, the connection then muted for it)."""
    if total:
        ctx.throttle_ms = ctx.broker.quotas.record("consumer_byte_rate", ctx.user, ctx.header.client_id or "",
                                                   total)
        body["throttle_time"] = ctx.throttle_ms
    return body


def list_offsets(ctx: RequestContext, request: Request) -> dict:
    registry = ctx.broker.registry
    replicas = ctx.broker.replicas
    topics = []
    for t in request.topics:
        partitions = []
        denied = not ctx.allowed(DESCRIBE, TOPIC, t.name)
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "error_code": ErrorCode.none, "timestamp": -1,
                     "offset": -1, "leader_epoch": 0}
            partitions.append(entry)
            if denied:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition = registry.partition(t.name, p.partition_index)
            if partition is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
            fetchable = partition.last_stable_offset if read_committed else partition.high_watermark
            leader = None
            if replicas is not None:
                code, leader = replicas.check(t.name, p.partition_index, getattr(p, "current_leader_epoch", -1))
                if code is not None:
                    entry["error_code"] = code
                    continue
                state = replicas.role(t.name, p.partition_index)
                if state is not None:
                    entry["leader_epoch"] = state.leader_epoch
            # KIP-207, as Kafka's fetchOffsetForTimestamp: a new leader whose high watermark (known as a follower) is
            # below its epoch's start offset until its followers fetch answers a client OFFSET_NOT_AVAILABLE
            # (retriable) where its answer would lie at or past that high watermark, not the stale figure
            lagging = leader is not None and getattr(request, "replica_id", -1) < 0 \
                and leader.epoch_start_offset > partition.high_watermark
            if p.timestamp == LATEST:
                if lagging:
                    entry["error_code"] = ErrorCode.offset_not_available
                    continue
                entry["offset"] = fetchable
            elif p.timestamp == EARLIEST:
                entry["offset"] = partition.log_start_offset
            elif p.timestamp == MAX_TIMESTAMP:
                entry["offset"], entry["timestamp"] = partition.max_timestamp()
            elif p.timestamp >= 0:
                found = partition.offset_for_timestamp(p.timestamp)
                if leader is not None and found is not None and found[0] >= fetchable:
                    found = None  # a leader answers what it can serve (Kafka: below the last fetchable offset)
                if found is not None:
                    entry["offset"], entry["timestamp"] = found
                elif lagging:
                    entry["error_code"] = ErrorCode.offset_not_available
            else:
                entry["error_code"] = ErrorCode.invalid_request
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


LEADER_EPOCH = 0  # one node that has always led every partition: every batch carries epoch 0


def offset_for_leader_epoch(ctx: RequestContext, request: Request) -> Response:
    """OffsetForLeaderEpoch (KIP-101/320): where each partition's log ends for a leader epoch, which a consumer
    compares with its position to detect a truncated log. This broker has led every partition since it was
    created, in epoch 0 (stamped in every batch, told in Metadata): epoch 0 ends at the high watermark (what a
    consumer may have read), a later epoch or -1 is unknown (-1, -1), as Kafka's epoch cache answers. A
    ``current_leader_epoch`` above 0 is UNKNOWN_LEADER_EPOCH; DESCRIBE on the topic is needed."""
    registry = ctx.broker.registry
    replicas = ctx.broker.replicas
    topics = []
    # as Kafka: a broker (CLUSTER_ACTION on the cluster) asks about any topic, a consumer needs DESCRIBE on it
    broker_asking = ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    for topic in request.topics:
        allowed = broker_asking or ctx.allowed(DESCRIBE, TOPIC, topic.topic)
        results = []
        for p in topic.partitions:
            result = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            partition = registry.partition(topic.topic, p.partition) if allowed else None
            if not allowed:
                result["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
            elif replicas is not None and replicas.role(topic.topic, p.partition) is not None:
                _epoch_end(result, replicas, partition, topic.topic, p)
            elif p.current_leader_epoch > LEADER_EPOCH:
                result["error_code"] = ErrorCode.unknown_leader_epoch
            elif p.leader_epoch == LEADER_EPOCH:
                result.update(leader_epoch=LEADER_EPOCH, end_offset=partition.high_watermark)
            results.append(result)
        topics.append({"topic": topic.topic, "partitions": results})
    return {"throttle_time": 0, "topics": topics}


def _epoch_end(result: dict, replicas, partition, topic: str, p) -> None:
    """OffsetForLeaderEpoch on a replicated partition, answered by its leader from the leader-epoch cache
    (Kafka's LeaderEpochFileCache.endOffsetFor): a follower asks it before fetching, to cut what its leader
    does not have (KIP-279); a consumer, to detect a truncated log (KIP-320)."""
    code, _ = replicas.check(topic, p.partition, p.current_leader_epoch)
    if code is not None:
        result["error_code"] = code
        return
    result["leader_epoch"], result["end_offset"] = partition.leader_epochs.end_offset_for(p.leader_epoch,
                                                                                          partition.log_end_offset)


APIS = {
    1: (4, 18, fetch),
    2: (1, 7, list_offsets),
    23: (2, 4, offset_for_leader_epoch),
}

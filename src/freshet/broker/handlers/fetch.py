"""Fetch (with long-poll) and ListOffsets: reading the log."""

from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from freshet.log import OffsetOutOfRangeError

from ..context import Request, RequestContext, Response
from ..security.acls import DESCRIBE, READ, TOPIC

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
INVALID_SESSION_ID = 0


def _read_all(ctx, request) -> tuple[dict, int, bool]:
    """One pass over the requested partitions: (response body, record bytes, any error)."""
    registry = ctx.broker.registry
    max_bytes = request.max_bytes if request.max_bytes > 0 else 1 << 31
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    total = 0
    any_error = False
    responses = []
    for t in request.topics:
        partitions = []
        name = getattr(t, "topic", None)
        unknown_id = False
        if name is None:  # v13+: the topic named by its id
            topic = registry.by_id.get(t.topic_id)
            name, unknown_id = (topic.name, False) if topic is not None else ("", True)
        denied = not unknown_id and not ctx.allowed(READ, TOPIC, name)
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
                any_error = True
                continue
            hw = partition.high_watermark
            lso = partition.last_stable_offset
            entry.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=partition.log_start_offset)
            remaining = max_bytes - total
            if remaining <= 0:
                continue
            upper = lso if read_committed else hw
            if upper < p.fetch_offset <= hw:
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
            if read_committed:
                entry["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in partition.aborted_transactions(p.fetch_offset, upper)]
        responses.append({"topic": name, "topic_id": getattr(t, "topic_id", None), "partitions": partitions})
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": INVALID_SESSION_ID,
            "responses": responses}
    return body, total, any_error


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
                result, sent, any_error = _read_all(ctx, request)
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
            if p.timestamp == LATEST:
                read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
                entry["offset"] = partition.last_stable_offset if read_committed else partition.high_watermark
            elif p.timestamp == EARLIEST:
                entry["offset"] = partition.log_start_offset
            elif p.timestamp == MAX_TIMESTAMP:
                entry["offset"], entry["timestamp"] = partition.max_timestamp()
            elif p.timestamp >= 0:
                found = partition.offset_for_timestamp(p.timestamp)
                if found is not None:
                    entry["offset"], entry["timestamp"] = found
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
    topics = []
    for topic in request.topics:
        allowed = ctx.allowed(DESCRIBE, TOPIC, topic.topic)
        results = []
        for p in topic.partitions:
            result = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            partition = registry.partition(topic.topic, p.partition) if allowed else None
            if not allowed:
                result["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
            elif p.current_leader_epoch > LEADER_EPOCH:
                result["error_code"] = ErrorCode.unknown_leader_epoch
            elif p.leader_epoch == LEADER_EPOCH:
                result.update(leader_epoch=LEADER_EPOCH, end_offset=partition.high_watermark)
            results.append(result)
        topics.append({"topic": topic.topic, "partitions": results})
    return {"throttle_time": 0, "topics": topics}


APIS = {
    1: (4, 18, fetch),
    2: (1, 7, list_offsets),
    23: (2, 4, offset_for_leader_epoch),
}

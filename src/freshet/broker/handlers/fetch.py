"""Fetch (with long-poll) and ListOffsets: reading the log."""

from __future__ import annotations

import asyncio
import time

from freshet.log import OffsetOutOfRangeError

from .. import errors

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
INVALID_SESSION_ID = 0
FETCH_SESSION_ID_NOT_FOUND = 70


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
        for p in t.partitions:
            entry = {"partition_index": p.partition, "error_code": errors.NONE, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": [] if read_committed else None,
                     "preferred_read_replica": -1, "records": b""}
            partitions.append(entry)
            partition = registry.partition(t.topic, p.partition)
            if partition is None:
                entry["error_code"] = errors.UNKNOWN_TOPIC_OR_PARTITION
                any_error = True
                continue
            hw = partition.high_watermark
            entry.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=partition.log_start_offset)
            remaining = max_bytes - total
            if remaining <= 0:
                continue
            try:
                data = partition.read(p.fetch_offset, min(p.partition_max_bytes, remaining))
            except OffsetOutOfRangeError:
                entry["error_code"] = errors.OFFSET_OUT_OF_RANGE
                any_error = True
                continue
            if total and len(data) > remaining:
                continue  # only the very first batch may exceed max_bytes
            entry["records"] = data
            total += len(data)
        responses.append({"topic": t.topic, "partitions": partitions})
    body = {"throttle_time": 0, "error_code": errors.NONE, "session_id": INVALID_SESSION_ID,
            "responses": responses}
    return body, total, any_error


def fetch(ctx, request):
    if getattr(request, "session_id", 0) != INVALID_SESSION_ID:
        return {"throttle_time": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
    body, total, any_error = _read_all(ctx, request)
    max_wait_s = request.max_wait.total_seconds()
    if total >= request.min_bytes or any_error or max_wait_s <= 0:
        return body

    async def long_poll() -> dict:
        deadline = time.monotonic() + max_wait_s
        result = body
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return result
            moved = ctx.broker.group_commit.high_watermark_moved()
            try:
                await asyncio.wait_for(moved, remaining)
            except asyncio.TimeoutError:
                return result
            result, total, any_error = _read_all(ctx, request)
            if total >= request.min_bytes or any_error:
                return result

    return long_poll()


def list_offsets(ctx, request) -> dict:
    registry = ctx.broker.registry
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "error_code": errors.NONE, "timestamp": -1,
                     "offset": -1, "leader_epoch": 0}
            partitions.append(entry)
            partition = registry.partition(t.name, p.partition_index)
            if partition is None:
                entry["error_code"] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if p.timestamp == LATEST:
                entry["offset"] = partition.high_watermark
            elif p.timestamp == EARLIEST:
                entry["offset"] = partition.log_start_offset
            elif p.timestamp == MAX_TIMESTAMP:
                entry["offset"], entry["timestamp"] = partition.max_timestamp()
            elif p.timestamp >= 0:
                found = partition.offset_for_timestamp(p.timestamp)
                if found is not None:
                    entry["offset"], entry["timestamp"] = found
            else:
                entry["error_code"] = errors.INVALID_REQUEST
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


APIS = {
    1: (4, 12, fetch),
    2: (1, 7, list_offsets),
}

"""Produce and InitProducerId: writing to the log, idempotently when the producer asks."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from freshet.format.record_batch import HEADER_SIZE, read_header
from freshet.log import LogError, StorageError

from ..context import Request, RequestContext, Response
from ..errors import error_code_for
from ..replication import ReplicationError
from ..security.acls import CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE
from ..transactions import TransactionError

log = logging.getLogger(__name__)

MAX_EPOCH = 32767


def produce(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    registry = broker.registry
    acks = request.acks
    responses = []
    waits: list[tuple[dict, asyncio.Future, str, int]] = []
    replicas = broker.replicas  # None: one node, no replication
    hinted: set[int] = set()  # leaders named in KIP-951 hints (their endpoints go in the response)
    txn_id = getattr(request, "transactional_id", None)
    txn_denied = bool(txn_id) and not ctx.allowed(WRITE, TRANSACTIONAL_ID, txn_id)
    for topic_data in request.topic_data:
        name = getattr(topic_data, "name", None)
        topic_id = getattr(topic_data, "topic_id", None)
        if name is None:  # v13+: the topic named by its id
            known = registry.by_id.get(topic_id)
            name = known.name if known is not None else None
        topic_denied = name is not None and not ctx.allowed(WRITE, TOPIC, name)
        partition_responses = []
        for pd in topic_data.partition_data:
            result = {"index": pd.index, "error_code": ErrorCode.none, "base_offset": -1,
                      "log_append_time": None, "log_start_offset": -1, "record_errors": [],
                      "error_message": None}
            partition_responses.append(result)
            if acks not in (-1, 0, 1):
                result["error_code"] = ErrorCode.invalid_required_acks
                continue
            if name is None:
                result["error_code"] = ErrorCode.unknown_topic_id
                result["error_message"] = f"no topic with id {topic_id}"
                continue
            if txn_denied:
                result["error_code"] = ErrorCode.transactional_id_authorization_failed
                continue
            if topic_denied:
                result["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition = registry.partition(name, pd.index)
            if partition is not None and registry.topics[name].internal:
                result["error_code"] = ErrorCode.invalid_topic_exception
                result["error_message"] = f"{name} is an internal topic"
                continue
            if partition is None:
                if replicas is not None and replicas.role(name, pd.index) is not None:
                    # in the cluster's metadata, no replica here (moved away): as Kafka, not "unknown"
                    _not_leader(result, replicas, name, pd.index, ErrorCode.not_leader_or_follower, hinted)
                    continue
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"no partition {name}-{pd.index}"
                continue
            if not pd.records:
                result["error_code"] = ErrorCode.corrupt_message
                result["error_message"] = "empty record set"
                continue
            if _more_than_one_batch(pd.records):
                result["error_code"] = ErrorCode.invalid_record
                result["error_message"] = ("Produce requests with version 3 or above are only allowed to contain "
                                           "exactly one record batch per partition")
                continue
            refused = _transactional_refusal(broker, pd.records, name, pd.index)
            if refused is not None:
                result["error_code"], result["error_message"] = refused
                continue
            leader = None
            if replicas is not None:
                code, leader = replicas.check(name, pd.index)
                if code is not None:
                    _not_leader(result, replicas, name, pd.index, code, hinted)
                    continue
                if leader is not None and acks == -1 and len(leader.isr) < leader.min_insync:
                    result["error_code"] = ErrorCode.not_enough_replicas
                    result["error_message"] = (f"the ISR {list(leader.isr)} of {name}-{pd.index} is smaller than "
                                               f"min.insync.replicas={leader.min_insync}")
                    continue
            try:
                appended = partition.append(pd.records)
            except LogError as exc:
                result["error_code"] = error_code_for(exc)
                result["error_message"] = str(exc)
                # v8+: the records at fault, so the client fails exactly those (the rest of the batch with them)
                result["record_errors"] = [{"batch_index": index, "batch_index_error_message": why}
                                           for index, why in exc.record_errors]
                if not isinstance(exc, StorageError):
                    log.debug("produce to %s-%d refused: %s", name, pd.index, exc)
                else:
                    log.error("produce to %s-%d failed: %s", name, pd.index, exc)
                continue
            broker.group_commit.written(partition)
            result["base_offset"] = appended.base_offset
            result["log_start_offset"] = appended.log_start_offset
            if appended.log_append_time >= 0:
                result["log_append_time"] = appended.log_append_time
            if acks == -1:
                if leader is not None:  # the ISR must have it: a task, so its timeout starts now
                    waits.append((result, asyncio.ensure_future(
                        leader.acknowledged(appended.last_offset, request.timeout.total_seconds())), name, pd.index))
                else:
                    waits.append((result, broker.group_commit.durable(partition, appended.last_offset), name, pd.index))
        responses.append({"name": name, "topic_id": topic_id, "partition_responses": partition_responses})
    produced_bytes = sum(len(pd.records or b"") for t in request.topic_data for pd in t.partition_data)
    ctx.throttle_ms = broker.quotas.record("producer_byte_rate", ctx.user, ctx.header.client_id or "", produced_bytes)
    if acks == 0:
        return None
    body = {"responses": responses, "throttle_time": ctx.throttle_ms}
    if hinted:
        body["node_endpoints"] = replicas.node_endpoints(hinted)
    if not waits:
        return body

    async def when_durable() -> dict:
        for result, fut, name, index in waits:
            try:
                await fut
            except StorageError as exc:
                result.update(error_code=ErrorCode.kafka_storage_error, error_message=str(exc), base_offset=-1)
            except ReplicationError as exc:
                result.update(error_code=exc.error_code, error_message=str(exc), base_offset=-1)
                if exc.error_code == ErrorCode.not_leader_or_follower:
                    _not_leader(result, replicas, name, index, exc.error_code, hinted)
                    body["node_endpoints"] = replicas.node_endpoints(hinted)
        return body

    return when_durable()


def _not_leader(result: dict, replicas, topic: str, index: int, code: ErrorCode, hinted: set[int]) -> None:
    """NOT_LEADER_OR_FOLLOWER (or a fenced / unknown leader epoch) with KIP-951's hint: who leads, in which
    epoch (Produce v10+; the leader's endpoint goes in the response's node_endpoints)."""
    result["error_code"] = code
    current = replicas.current_leader(topic, index)
    result["current_leader"] = current
    result["error_message"] = (f"this broker does not lead {topic}-{index}: broker {current['leader_id']} does, "
                               f"in leader epoch {current['leader_epoch']}")
    if current["leader_id"] >= 0:
        hinted.add(current["leader_id"])


def _more_than_one_batch(records) -> bool:
    """Kafka's ProduceRequest.validateRecords (v3+, the oldest served): a partition's records are exactly one batch
    (INVALID_RECORD otherwise: the transactional check, the idempotence check and record_errors' indexes are each
    of one batch). Bytes after the first batch's length (LOG_OVERHEAD 12 + its size) start another."""
    if len(records) < 12:
        return False  # the log refuses it as corrupt
    first = 12 + int.from_bytes(bytes(records[8:12]), "big", signed=True)
    return 12 < first and len(records) - first >= 12


def _transactional_refusal(broker, records, topic: str, index: int) -> tuple[ErrorCode, str] | None:
    """A transactional batch is written only by the transaction's current epoch, to a partition the
    transaction added (checked on the first batch's header; the log validates the rest)."""
    if len(records) < HEADER_SIZE:
        return None  # the log refuses it as corrupt
    header = read_header(records)
    if not header.is_transactional or header.is_control:
        return None
    code = broker.transactions.check_produce(header.producer_id, header.producer_epoch, topic, index)
    if code is None:
        return None
    return code, (f"producer {header.producer_id} epoch {header.producer_epoch} has no open transaction "
                  f"holding {topic}-{index} at this epoch")


def init_producer_id(ctx: RequestContext, request: Request) -> Response:
    if request.transactional_id:  # null or "": an idempotent producer only
        if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                    "producer_id": -1, "producer_epoch": -1}
        return _init_transactional(ctx, request)
    if not (ctx.allowed(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or _may_write_somewhere(ctx)):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "producer_id": -1,
                "producer_epoch": -1}
    ids = ctx.broker.registry.producer_ids
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and epoch >= 0 and epoch < MAX_EPOCH:
        # KIP-360: a producer that lost track of its sequences bumps its epoch and starts at 0
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": producer_id,
                "producer_epoch": epoch + 1}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": ids.allocate(), "producer_epoch": 0}


def _may_write_somewhere(ctx: RequestContext) -> bool:
    """Kafka 3+: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on some topic: an ACL
    that allows it, whether or not a topic it names exists yet (a connector's prefixed topics are created
    after its producer starts)."""
    return ctx.allowed_on_some(WRITE, TOPIC)


def _init_transactional(ctx: RequestContext, request: Request) -> Response:
    async def run() -> dict:
        try:
            producer_id, epoch = await ctx.broker.transactions.init_producer_id(
                request.transactional_id, int(request.transaction_timeout.total_seconds() * 1000),
                getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
        except TransactionError as exc:
            code = exc.error_code
            if code == ErrorCode.producer_fenced and ctx.version < 4:
                code = ErrorCode.invalid_producer_epoch
            return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": producer_id,
                "producer_epoch": epoch}

    return run()


APIS = {
    0: (3, 13, produce),
    22: (0, 4, init_producer_id),
}

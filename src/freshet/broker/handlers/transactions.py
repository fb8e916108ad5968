"""Kafka transactions: AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and the admin APIs
DescribeTransactions, ListTransactions and DescribeProducers. InitProducerId (idempotent and transactional) is in
``produce``; the coordinator's rules are in ``freshet.broker.transactions``."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from freshet.log import LogError

from ..context import Request, RequestContext, Response
from ..errors import error_code_for
from ..groups.classic import GroupError
from ..groups.consumer import ConsumerGroupError
from ..groups.offsets import CommittedOffset
from ..security.acls import (CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, DESCRIBE, GROUP, READ, TOPIC, TRANSACTIONAL_ID,
                             WRITE)
from ..replication import ReplicationError
from ..transactions import APPEND_TIMEOUT_S, STATES, TransactionError, write_marker
from .groups import MAX_METADATA, answer_when_durable, check_commit, partition_exists


def _fenced(ctx: RequestContext, first_version_with_producer_fenced: int = 2) -> ErrorCode:
    """Older versions of these APIs knew no PRODUCER_FENCED; Kafka answers them INVALID_PRODUCER_EPOCH."""
    if ctx.version >= first_version_with_producer_fenced:
        return ErrorCode.producer_fenced
    return ErrorCode.invalid_producer_epoch


def _ids(request: Request) -> tuple[str, int, int]:
    prefix = "v3_and_below_" if hasattr(request, "v3_and_below_transactional_id") else ""
    return (getattr(request, prefix + "transactional_id"), getattr(request, prefix + "producer_id"),
            getattr(request, prefix + "producer_epoch"))


def add_partitions_to_txn(ctx: RequestContext, request: Request) -> Response:
    transactional_id, producer_id, epoch = _ids(request)
    topics = getattr(request, "v3_and_below_topics", None) or getattr(request, "topics", ())
    wanted = [(t.name, p) for t in topics for p in t.partitions]

    def answer(codes: dict) -> dict:
        by_topic: dict[str, list] = {}
        for (topic, index), code in codes.items():
            by_topic.setdefault(topic, []).append({"partition_index": index, "partition_error_code": code})
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]}

    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, transactional_id):
        return answer({tp: ErrorCode.transactional_id_authorization_failed for tp in wanted})
    denied = {tp for tp in wanted if not ctx.allowed(WRITE, TOPIC, tp[0])}
    if denied:  # nothing is added: the denied partitions say why, the others were not attempted
        return answer({tp: ErrorCode.topic_authorization_failed if tp in denied else ErrorCode.operation_not_attempted
                       for tp in wanted})

    async def run() -> dict:
        try:
            codes = await ctx.broker.transactions.add_partitions(transactional_id, producer_id, epoch, wanted,
                                                                  _fenced(ctx))
        except TransactionError as exc:
            codes = {tp: exc.error_code for tp in wanted}
        return answer(codes)

    return run()


async def _error_code_of(step) -> dict:
    """The answer of a request whose response is an error code alone."""
    try:
        await step
    except TransactionError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code}
    return {"throttle_time": 0, "error_code": ErrorCode.none}


def add_offsets_to_txn(ctx: RequestContext, request: Request) -> Response:
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not ctx.allowed(READ, GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    return _error_code_of(ctx.broker.transactions.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, _fenced(ctx)))


def end_txn(ctx: RequestContext, request: Request) -> Response:
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    return _error_code_of(ctx.broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed, _fenced(ctx)))


def txn_offset_commit(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    code = ErrorCode.none
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif not ctx.allowed(READ, GROUP, request.group_id):
        code = ErrorCode.group_authorization_failed
    elif broker.cluster is not None and not broker.cluster.coordinates():
        code = ErrorCode.not_coordinator  # the group's coordinator moved: the client finds the new one
    try:
        if code != ErrorCode.none:
            raise TransactionError(code)
        broker.transactions.check_offset_commit(request.transactional_id, request.producer_id,
                                                request.producer_epoch, request.group_id, _fenced(ctx, 3))
        generation = getattr(request, "generation_id", -1)
        if generation >= 0 or getattr(request, "member_id", ""):  # KIP-447: a group member's commit
            check_commit(broker, request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                         generation)
    except (TransactionError, GroupError, ConsumerGroupError) as exc:
        code = exc.error_code
    now = int(time.time() * 1000)
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    topics_out = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            part_code = code
            metadata = p.committed_metadata or ""
            if part_code == ErrorCode.none:
                if not ctx.allowed(READ, TOPIC, t.name):
                    part_code = ErrorCode.topic_authorization_failed
                elif not partition_exists(broker, t.name, p.partition_index):
                    part_code = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > MAX_METADATA:
                    part_code = ErrorCode.offset_metadata_too_large
            parts.append({"partition_index": p.partition_index, "error_code": part_code})
            if part_code == ErrorCode.none:
                accepted[(t.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1), metadata, now)
        topics_out.append({"name": t.name, "partitions": parts})
    body = {"throttle_time": 0, "topics": topics_out}
    if not accepted or any(p["error_code"] for t in topics_out for p in t["partitions"]):
        # all or nothing: one bad partition refuses the commit, and nothing is written
        for t in topics_out:
            for p in t["partitions"]:
                if p["error_code"] == ErrorCode.none:
                    p["error_code"] = ErrorCode.operation_not_attempted if accepted else ErrorCode.none
        return body
    return answer_when_durable(broker, lambda: broker.offsets.append_transactional(
        request.group_id, accepted, request.producer_id, request.producer_epoch), body)


def describe_transactions(ctx: RequestContext, request: Request) -> dict:
    coordinator = ctx.broker.transactions
    states = []
    for tid in request.transactional_ids:
        meta = coordinator.transactions.get(tid)
        if not ctx.allowed(DESCRIBE, TRANSACTIONAL_ID, tid):
            states.append({"error_code": ErrorCode.transactional_id_authorization_failed, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
        elif meta is None:
            states.append({"error_code": ErrorCode.transactional_id_not_found, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
        else:
            states.append(coordinator.describe(meta))
    return {"throttle_time": 0, "transaction_states": states}


def list_transactions(ctx: RequestContext, request: Request) -> dict:
    wanted_states = set(request.state_filters)
    unknown = sorted(s for s in wanted_states if s not in STATES)
    pids = set(request.producer_id_filters)
    min_duration = getattr(request, "duration_filter", -1)
    now = int(time.time() * 1000)
    out = []
    for meta in ctx.broker.transactions.transactions.values():
        if not ctx.allowed(DESCRIBE, TRANSACTIONAL_ID, meta.transactional_id):
            continue
        if wanted_states and meta.state not in wanted_states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if min_duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration):
            continue
        out.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                    "transaction_state": meta.state})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
            "transaction_states": out}


def describe_producers(ctx: RequestContext, request: Request) -> dict:
    """The producers writing each partition: epoch, last sequence and, for a transactional one with a
    transaction open here, where it began (what holds the last stable offset back)."""
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            partition = ctx.broker.registry.partition(t.name, index)
            if not ctx.allowed(READ, TOPIC, t.name):
                parts.append({"partition_index": index, "error_code": ErrorCode.topic_authorization_failed,
                              "error_message": None, "active_producers": []})
                continue
            if partition is None:
                parts.append({"partition_index": index, "error_code": ErrorCode.unknown_topic_or_partition,
                              "error_message": f"no partition {t.name}-{index}", "active_producers": []})
                continue
            open_here = partition.transactions.open
            producers = []
            for pid, entry in sorted(partition.producer_state.producers.items()):
                last = entry.batches[-1] if entry.batches else None
                producers.append({"producer_id": pid, "producer_epoch": entry.epoch,
                                  "last_sequence": last.last_sequence if last else -1,
                                  "last_timestamp": last.max_timestamp if last else -1, "coordinator_epoch": 0,
                                  "current_txn_start_offset": open_here.get(pid, -1)})
            parts.append({"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                          "active_producers": producers})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def write_txn_markers(ctx: RequestContext, request: Request) -> Response:
    """WriteTxnMarkers (between brokers): the transaction coordinator ends a transaction on partitions this broker
    leads. CLUSTER_ACTION on the cluster; NOT_LEADER_OR_FOLLOWER where this broker does not lead (the coordinator
    tries the new leader); answered once the markers are durable (in a cluster: in the ISR)."""
    broker = ctx.broker
    allowed = ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    results, waits = [], []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            partitions = []
            for index in t.partition_indexes:
                entry = {"partition_index": index, "error_code": ErrorCode.none}
                partitions.append(entry)
                partition = broker.registry.partition(t.name, index)
                leader = broker.replicas.check(t.name, index)[1] if broker.replicas is not None else None
                if not allowed:
                    entry["error_code"] = ErrorCode.cluster_authorization_failed
                elif partition is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                elif broker.replicas is not None and leader is None:
                    entry["error_code"] = ErrorCode.not_leader_or_follower
                else:
                    try:
                        offset = write_marker(broker, partition, marker.producer_id, marker.producer_epoch,
                                              marker.transaction_result, marker.coordinator_epoch)
                    except TransactionError as exc:  # a deposed coordinator's marker
                        entry["error_code"] = exc.error_code
                        continue
                    except LogError as exc:
                        entry["error_code"] = error_code_for(exc)
                        continue
                    waits.append((entry, leader.acknowledged(offset, APPEND_TIMEOUT_S) if leader is not None
                                  else broker.group_commit.durable(partition, offset)))
            topics.append({"name": t.name, "partitions": partitions})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    body = {"markers": results}
    if not waits:
        return body

    async def when_durable() -> dict:
        for entry, durable in waits:
            try:
                await durable
            except ReplicationError as exc:  # not in the ISR (the coordinator tries again, maybe elsewhere)
                entry["error_code"] = exc.error_code
            except Exception:
                entry["error_code"] = ErrorCode.kafka_storage_error
        return body

    return when_durable()


APIS = {
    27: (1, 1, write_txn_markers),
    24: (0, 3, add_partitions_to_txn),
    25: (0, 3, add_offsets_to_txn),
    26: (0, 3, end_txn),
    28: (0, 3, txn_offset_commit),
    65: (0, 0, describe_transactions),
    66: (0, 1, list_transactions),
    61: (0, 0, describe_producers),
}

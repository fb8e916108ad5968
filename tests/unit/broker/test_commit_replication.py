"""An offset commit on a cluster is answered once the ISR of ``__consumer_offsets`` has it; when the coordinator
loses that partition's leadership first (the commit may be cut from the log), it answers NOT_COORDINATOR so the
client commits again at the new coordinator. A fresh-clone run saw a TxnOffsetCommit never answered (242 s) after
the leadership moved: the wait was for a high watermark the old leader would not move."""

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from freshet.broker.groups.offsets import failed_append_code
from freshet.broker.handlers.groups import answer_when_durable
from freshet.broker.replication import ReplicationError
from freshet.log import StorageError


class _Leader:
    def __init__(self, outcome: Exception | None) -> None:
        self.outcome, self.asked = outcome, []

    async def acknowledged(self, last_offset: int, timeout_s: float) -> None:
        self.asked.append(last_offset)
        if self.outcome is not None:
            raise self.outcome


def _broker(leader):
    return SimpleNamespace(
        cluster=object(), offsets=SimpleNamespace(partition="offsets-0"),
        group_commit=SimpleNamespace(written=lambda partition: None),
        replicas=SimpleNamespace(check=lambda topic, index: (None if leader else ErrorCode.not_leader_or_follower,
                                                             leader)))


def _answer(broker) -> list[int]:
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none},
                                                    {"partition_index": 1,
                                                     "error_code": ErrorCode.unknown_topic_or_partition}]}]}
    out = asyncio.run(answer_when_durable(broker, lambda: 41, body))
    return [p["error_code"] for p in out["topics"][0]["partitions"]]


def test_a_commit_is_answered_once_the_isr_has_it():
    leader = _Leader(None)
    assert _answer(_broker(leader)) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert leader.asked == [41]


def test_a_commit_whose_leader_was_lost_before_the_isr_had_it_answers_not_coordinator():
    lost = _Leader(ReplicationError(ErrorCode.not_leader_or_follower, "stopped leading"))
    assert _answer(_broker(lost)) == [ErrorCode.not_coordinator, ErrorCode.unknown_topic_or_partition]
    timed_out = _Leader(ReplicationError(ErrorCode.request_timed_out, "the ISR did not have it"))
    assert _answer(_broker(timed_out)) == [ErrorCode.coordinator_not_available, ErrorCode.unknown_topic_or_partition]
    assert _answer(_broker(None)) == [ErrorCode.not_coordinator, ErrorCode.unknown_topic_or_partition]


def test_a_commit_whose_log_failed_answers_not_coordinator_as_kafka_maps_a_storage_error():
    failed = _Leader(StorageError("fsync failed; the write is not durable"))
    assert _answer(_broker(failed)) == [ErrorCode.not_coordinator, ErrorCode.unknown_topic_or_partition]


def test_both_coordinators_map_a_failed_append_as_kafka_does():
    """One table for __consumer_offsets and __transaction_state (Kafka's appendGroupMetadataErrorToResponseError and
    TransactionStateManager): a lost leadership or a failed log sends the client to FindCoordinator, the rest is
    retried where it is."""
    assert failed_append_code(ReplicationError(ErrorCode.not_leader_or_follower, "")) == ErrorCode.not_coordinator
    assert failed_append_code(StorageError("read-only")) == ErrorCode.not_coordinator
    for code in (ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append):
        assert failed_append_code(ReplicationError(code, "")) == ErrorCode.coordinator_not_available

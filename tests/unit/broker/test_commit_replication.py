"""An offset commit on a cluster is answered once the ISR of ``__consumer_offsets`` has it; when the coordinator
loses that partition's leadership first (the commit may be cut from the log), it answers NOT_COORDINATOR so the
client commits again at the new coordinator. A fresh-clone run saw a TxnOffsetCommit never answered (242 s) after
the leadership moved: the wait was for a high watermark the old leader would not move."""

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from freshet.broker.handlers.groups import answer_when_durable
from freshet.broker.replication import ReplicationError


class _Leader:
    def __init__(self, outcome: ReplicationError | None) -> None:
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
    out = asyncio.run(answer_when_durable(broker, 41, body))
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

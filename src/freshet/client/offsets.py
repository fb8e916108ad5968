"""A partition's watermarks, asked again while its leader cannot answer yet (as Kafka's Java clients do).

A leader elected a moment ago answers ListOffsets OFFSET_NOT_AVAILABLE until its high watermark has caught up
with its epoch's start (KIP-207); a leader moving answers NOT_LEADER_FOR_PARTITION or a leader-epoch error.
librdkafka raises these from ``Consumer.get_watermark_offsets`` as a KafkaException whose error is not marked
retriable, so a bare call fails right after a leader change ("Leader high watermark is not caught up").
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# what a leader answers while it cannot answer yet; _TIMED_OUT when librdkafka gave up on one request early
RETRIABLE_LIST_OFFSETS = frozenset((KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
                                    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_LEADER_EPOCH,
                                    KafkaError.FENCED_LEADER_EPOCH, KafkaError._TIMED_OUT))
PAUSE_S = 0.1


def retriable(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in RETRIABLE_LIST_OFFSETS)


def watermark_offsets(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    """The partition's (low, high) as its leader answers ListOffsets (``cached=False``; a read_committed
    consumer's high is the last stable offset), asked again after a short pause while the answer is a
    retriable error, until ``timeout`` seconds are spent; then the last error is raised. Any other error is
    raised at once."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(remaining, 0.001), cached=False)
        except KafkaException as exc:
            if not retriable(exc) or deadline - time.monotonic() <= PAUSE_S:
                raise
        time.sleep(PAUSE_S)

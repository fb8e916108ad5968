"""Transactions as an operator sees them: which are open, on which partitions, and how far each partition's
last stable offset lags its high watermark.

librdkafka has no admin call for ListTransactions / DescribeTransactions, so these go through
kafka-python's admin client (a well-kept Kafka client too); the offsets come from confluent-kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from .errors import ClientError
from .config import consumer_config, resolve_bootstrap
from .offsets import watermark_offsets

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")


@dataclass
class TransactionInfo:
    transactional_id: str
    producer_id: int
    state: str
    producer_epoch: int = -1
    timeout_ms: int = -1
    start_time_ms: int = -1
    # (topic, partition) -> (last stable offset, high watermark)
    partitions: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


def _admin(bootstrap: str | None, overrides: dict | None = None):
    """kafka-python's admin client with the FRESHET_* security settings, ``overrides`` (librdkafka's names:
    another user's SASL name and password) over them."""
    from kafka.errors import KafkaError

    from .kafka_python import admin_client

    try:
        return admin_client(resolve_bootstrap(bootstrap), 10_000, overrides)
    except KafkaError as exc:
        raise ClientError(f"cannot reach the Kafka cluster at {resolve_bootstrap(bootstrap)}: {exc}") from None


def list_transactions(bootstrap: str | None = None, state: str | None = None,
                      overrides: dict | None = None) -> list[TransactionInfo]:
    """Every transactional id the cluster's coordinators know (that the user may describe), optionally only those
    in ``state``; ``overrides``: another user's SASL settings (librdkafka's names) to ask as."""
    if state is not None and state not in STATES:
        raise ClientError(f"unknown transaction state {state!r}; one of {', '.join(STATES)}")
    admin = _admin(bootstrap, overrides)
    try:
        listings = admin.list_transactions(state_filters=[state] if state else None)
    finally:
        admin.close()
    found = [TransactionInfo(t.transactional_id, t.producer_id, t.state.value)
             for per_broker in listings.values() for t in per_broker]
    return sorted(found, key=lambda t: t.transactional_id)


def describe_transaction(transactional_id: str, bootstrap: str | None = None,
                         overrides: dict | None = None) -> TransactionInfo:
    """One transaction, with each partition's last stable offset and high watermark (``overrides``: as
    list_transactions)."""
    from kafka.errors import KafkaError

    admin = _admin(bootstrap, overrides)
    try:
        described = admin.describe_transactions([transactional_id])[transactional_id]
    except KafkaError as exc:
        raise ClientError(f"cannot describe transaction {transactional_id!r}: {exc}") from None
    finally:
        admin.close()
    info = TransactionInfo(transactional_id, described.producer_id, described.state.value,
                           described.producer_epoch, described.transaction_timeout_ms,
                           described.transaction_start_time_ms)
    if described.topic_partitions:
        committed = Consumer(consumer_config(bootstrap, overrides={"isolation.level": "read_committed",
                                                                   "log_level": 0, **(overrides or {})}))
        uncommitted = Consumer(consumer_config(bootstrap, overrides={"isolation.level": "read_uncommitted",
                                                                     "log_level": 0, **(overrides or {})}))
        try:
            for tp in sorted(described.topic_partitions):
                lso = watermark_offsets(committed, TopicPartition(tp.topic, tp.partition), 10)[1]
                hw = watermark_offsets(uncommitted, TopicPartition(tp.topic, tp.partition), 10)[1]
                info.partitions[(tp.topic, tp.partition)] = (lso, hw)
        finally:
            committed.close()
            uncommitted.close()
    return info

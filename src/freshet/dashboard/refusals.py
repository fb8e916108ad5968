"""The cluster's refusal of an admin request as the page shows it: one line, the broker's Kafka error name and its
own message, under the HTTP status a person would expect (nothing was changed)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from fastapi import HTTPException

NOT_FOUND = {"UNKNOWN_TOPIC_OR_PART", "GROUP_ID_NOT_FOUND", "GROUP_SUBSCRIBED_TO_TOPIC"}
CONFLICT = {"TOPIC_ALREADY_EXISTS", "NON_EMPTY_GROUP", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS",
            "ILLEGAL_GENERATION", "FENCED_MEMBER_EPOCH", "STALE_MEMBER_EPOCH"}
UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT}


def refusal(exc: KafkaException, what: str) -> HTTPException:
    """``what``: the operation, e.g. "cannot create topic 'x'"; the detail reads "<what>: NAME: message"."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return HTTPException(502, f"{what}: {exc}")
    name = err.name()
    status = (404 if name in NOT_FOUND else 409 if name in CONFLICT else 403 if "AUTHORIZATION" in name
              else 504 if err.code() in UNREACHABLE else 400)
    return HTTPException(status, f"{what}: {name}: {err.str()}")

"""The client's errors: one exception for a failure worth one line to the user, and librdkafka's message of a
KafkaException. Imports nothing of the client, so every client module may import it."""

from __future__ import annotations

from confluent_kafka import KafkaException


class ClientError(Exception):
    """A failure worth one line to the user (unreachable broker, unknown topic, refused config)."""


def kafka_message(exc: BaseException) -> str:
    """librdkafka's own words for a KafkaException (its KafkaError's str()), else the exception's text."""
    if isinstance(exc, KafkaException) and exc.args:
        err = exc.args[0]
        return err.str() if hasattr(err, "str") else str(err)
    return str(exc)

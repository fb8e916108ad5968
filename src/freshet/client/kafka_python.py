"""kafka-python's admin client, for what librdkafka has no call for: made with our security settings
(``admin_client``), and the requests it has no call for either (AlterPartitionReassignments, DescribeClientQuotas,
...) sent through its connection manager to a broker of the cluster, as Kafka's admin client sends them (``send``)."""

from __future__ import annotations

from .config import security_config
from .errors import ClientError

# librdkafka's names -> kafka-python's (KafkaAdminClient's keyword arguments)
KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
}


def admin_client(bootstrap: str, timeout_ms: int, overrides: dict | None = None):
    """kafka-python's admin client with the FRESHET_* security settings every client of ours uses, ``overrides``
    (librdkafka's names: another user's SASL name and password) over them. kafka-python's errors pass through."""
    from kafka.admin import KafkaAdminClient

    settings = {KAFKA_PYTHON_NAMES[k]: v for k, v in {**security_config(), **(overrides or {})}.items()
                if k in KAFKA_PYTHON_NAMES}
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **settings)


def send(admin, request, node_id: int | None = None):
    """``request``'s answer from broker ``node_id``, or from any broker (each forwards what the controllers
    decide). The broker kafka-python picks may be one that has just gone down (the metadata still names it):
    a refused request then goes to another (the refused one is in its reconnect backoff, so it is not picked
    again at once), as Kafka's admin client retries; only requests that are safe to send again come here (the
    same target set again, or a read). Any other error, or every known broker refusing, is a ClientError."""
    from kafka.errors import KafkaConnectionError, KafkaError, NodeNotReadyError

    manager = admin._manager

    async def one():
        return await (manager.send(request, node_id=node_id) if node_id is not None else manager.send(request))

    refused = 0
    while True:
        try:
            return manager.run(one)
        except (KafkaConnectionError, NodeNotReadyError) as exc:
            refused += 1
            if node_id is not None or refused > 2 * max(1, len(manager.cluster.brokers())):
                raise ClientError(str(exc)) from None
        except KafkaError as exc:
            raise ClientError(str(exc)) from None

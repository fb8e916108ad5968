"""Reading as the signed-in user (``--login``) where the dashboard's figures come from its own round: whether the
user may READ the topics a tab is made from (the pipeline registry, the application registry, the ingest
registry, the stored rules and queries), asked of the cluster as them with one fetch, so their ACLs decide as
they would for any client of theirs; and whether they may look at the cluster as a whole (the Clients tab: what
clients push to the brokers is the cluster's, DESCRIBE_CONFIGS on it, as Kafka asks for a broker's configs)."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from freshet.client import consumer_config


def may_read(bootstrap: str, credentials: dict, topics: list[str], timeout_s: float = 10.0) -> set[str]:
    """Those of ``topics`` (each one the user may describe) whose first partition the user may fetch from: a
    record, or the partition's end, answers yes; TOPIC_AUTHORIZATION_FAILED no; no answer in time: no."""
    if not topics:
        return set()
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0, "enable.partition.eof": True,
                                                              **credentials}))
    answered: dict[str, bool] = {}
    try:
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        deadline = time.monotonic() + timeout_s
        while len(answered) < len(topics) and time.monotonic() < deadline:
            for m in consumer.consume(len(topics), 0.2):
                err = m.error()
                if m.topic() is None or m.topic() in answered:
                    continue
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    answered[m.topic()] = True
                elif err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    answered[m.topic()] = False
    finally:
        consumer.close()
    return {t for t, yes in answered.items() if yes}


def may_describe_cluster(admin: AdminClient) -> bool:
    """Whether ``admin``'s user may read a broker's configs (DESCRIBE_CONFIGS on the cluster)."""
    brokers = admin.list_topics(timeout=10).brokers
    if not brokers:
        return False
    resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
    try:
        admin.describe_configs([resource], request_timeout=10)[resource].result(15)
    except KafkaException as exc:
        if "AUTHORIZATION" in exc.args[0].name():
            return False
        raise
    return True

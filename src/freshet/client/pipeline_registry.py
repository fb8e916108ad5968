"""Running pipelines announce themselves in the compacted topic ``__freshet_pipelines`` (key: query
name, value: status and the latest progress) and obey stop requests from
``__freshet_pipeline_control``. The dashboard and ``freshet pipelines`` read and write these topics
with a Kafka client alone (no Spark); the Spark listener that writes them is ``freshet.spark.registry``.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from .admin import TopicAdmin
from .config import consumer_config, producer_config
from .errors import ClientError
from .offsets import watermark_offsets
from .produce import flush_delivered

PIPELINES_TOPIC = "__freshet_pipelines"
CONTROL_TOPIC = "__freshet_pipeline_control"


def ensure_topics(bootstrap: str) -> None:
    admin = TopicAdmin(bootstrap)
    existing = admin.list_topics()
    admin.ensure_topic(PIPELINES_TOPIC, 1, {"cleanup.policy": "compact"}, existing)
    admin.ensure_topic(CONTROL_TOPIC, 1, {"retention.ms": "3600000"}, existing)


def request_stop(bootstrap: str, name: str, timeout_s: float = 10.0, overrides: dict | None = None) -> None:
    """Write a stop request for pipeline ``name``; ClientError when the log did not acknowledge it in time
    (the pipeline would never see it, so saying "asked to stop" would be untrue). ``overrides``: another user's
    SASL settings (librdkafka's names) to write as, so their ACLs decide."""
    ensure_topics(bootstrap)
    producer = Producer(producer_config(bootstrap, {"log_level": 0, **(overrides or {})}))
    refused: list = []
    producer.produce(CONTROL_TOPIC, json.dumps({"name": name, "action": "stop"}).encode(), name.encode(),
                     on_delivery=lambda err, _msg: refused.append(err) if err is not None else None)
    if flush_delivered(producer, CONTROL_TOPIC, timeout_s):
        raise ClientError(f"the stop request for {name!r} was not written to {CONTROL_TOPIC} within "
                          f"{timeout_s:g} s (is the broker at {bootstrap} up?)")
    if refused:
        raise ClientError(f"the stop request for {name!r} was refused: {refused[0].str()}")


def read_pipelines(bootstrap: str) -> dict[str, dict]:
    """name -> latest status record."""
    consumer = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
    out: dict[str, dict] = {}
    try:
        low, high = watermark_offsets(consumer, TopicPartition(PIPELINES_TOPIC, 0), 10)
    except Exception:
        consumer.close()
        return out
    consumer.assign([TopicPartition(PIPELINES_TOPIC, 0, low)])
    position = low
    deadline = time.monotonic() + 10
    while position < high and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.3):
            if m.error() is None:
                position = m.offset() + 1
                if m.value() is not None:
                    out[m.key().decode()] = json.loads(m.value())
    consumer.close()
    return out

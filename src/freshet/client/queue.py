"""Queues on the log: share groups (KIP-932) through confluent-kafka's ShareConsumer.

A share group hands each record to one of its consumers at a time, however many there are (more consumers
than partitions is fine); a consumer acknowledges what it finished (ACCEPT), gives back what it could not do
(RELEASE: delivered again, perhaps to another consumer) or refuses it for good (REJECT). A record that is
neither acknowledged nor given back within the group's lock time, or whose consumer dies, comes back on its
own; one delivered ``share.delivery.count.limit`` times is archived. Order within a partition is therefore
not kept under redelivery, unlike a consumer group's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from .errors import ClientError
from .config import admin_config, share_consumer_config

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
SHARE_GROUP_CONFIGS = ("share.auto.offset.reset", "share.record.lock.duration.ms", "share.delivery.count.limit",
                       "share.session.timeout.ms", "share.heartbeat.interval.ms", "share.isolation.level")


def set_group_configs(bootstrap: str | None, group_id: str, configs: dict[str, str]) -> None:
    """Set a share group's own configs (Kafka's IncrementalAlterConfigs on the GROUP resource)."""
    unknown = sorted(set(configs) - set(SHARE_GROUP_CONFIGS))
    if unknown:
        raise ClientError(f"unknown share group config {', '.join(unknown)}; known: {', '.join(SHARE_GROUP_CONFIGS)}")
    admin = AdminClient(admin_config(bootstrap, {"log_level": 0}))
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    try:
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(10)
    except KafkaException as exc:
        raise ClientError(f"cannot set configs of group {group_id!r}: {exc.args[0].str()}") from None


def work_queue(bootstrap: str | None, group_id: str, topics: list[str], handle: Callable[[Message], AcknowledgeType],
               *, max_records: int | None = None, idle_s: float | None = None, overrides: dict | None = None) -> int:
    """Consume ``topics`` as one of ``group_id``'s competing consumers: ``handle`` says how to acknowledge each
    record (ACCEPT / RELEASE / REJECT; an exception releases it), acknowledgements are committed after every
    poll's records. Stops after ``max_records`` or ``idle_s`` seconds without a record; returns how many were
    handled."""
    consumer = ShareConsumer(share_consumer_config(bootstrap, group_id, overrides))
    handled = 0
    try:
        consumer.subscribe(topics)
        last = time.monotonic()
        while max_records is None or handled < max_records:
            messages = consumer.poll(1.0)
            if not messages:
                if idle_s is not None and time.monotonic() - last > idle_s:
                    break
                continue
            last = time.monotonic()
            for m in messages:
                if m.error():
                    raise ClientError(f"share consumer: {m.error().str()}")
                if max_records is not None and handled >= max_records:
                    consumer.acknowledge(m, RELEASE)  # past --max: back to the group, undelivered by us
                    continue
                try:
                    kind = handle(m)
                except Exception:
                    kind = RELEASE
                consumer.acknowledge(m, kind)
                handled += 1
            consumer.commit_sync(30)
    except KafkaException as exc:
        raise ClientError(f"share consumer: {exc.args[0].str()}") from None
    finally:
        consumer.close()
    return handled

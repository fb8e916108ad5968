"""Kafka's topic and dynamic broker configs that Freshet accepts, stores and describes without acting on them
(flush.ms, sasl.kerberos.*, ...: docs/features.md), as librdkafka's admin test (0081) sets them: taken by
AlterConfigs and IncrementalAlterConfigs, described back with their source, a bad value refused with nothing
stored."""

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, \
    ResourceType

from freshet.testing.topics import create_topic


def described(admin, resource_type, name):
    resource = ConfigResource(resource_type, name)
    return {k: (v.value, v.source) for k, v in admin.describe_configs([resource])[resource].result(10).items()}


def incremental(admin, resource_type, name, *changes):
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, op, value in changes])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_librdkafkas_admin_configs_are_accepted_and_described_back(broker, topic_name):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    topic = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"compression.type": "gzip",
                                                                       "flush.ms": "12345678"})
    for future in admin.alter_configs([topic]).values():  # the legacy AlterConfigs, as 0081 does first
        future.result(10)
    seen = described(admin, ResourceType.TOPIC, topic_name)
    assert seen["flush.ms"] == ("12345678", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["compression.type"] == ("gzip", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["min.cleanable.dirty.ratio"] == ("0.5", ConfigSource.DEFAULT_CONFIG.value)
    incremental(admin, ResourceType.TOPIC, topic_name, ("max.compaction.lag.ms", AlterConfigOpType.SET, "3600000"),
                ("preallocate", AlterConfigOpType.SET, "true"))
    seen = described(admin, ResourceType.TOPIC, topic_name)
    assert seen["max.compaction.lag.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["preallocate"] == ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    name = "sasl.kerberos.min.time.before.relogin"
    assert described(admin, ResourceType.BROKER, "0")[name] == ("60000", ConfigSource.STATIC_BROKER_CONFIG.value)
    incremental(admin, ResourceType.BROKER, "0", (name, AlterConfigOpType.SET, "58000"))
    try:
        assert described(admin, ResourceType.BROKER, "0")[name] == (
            "58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        incremental(admin, ResourceType.BROKER, "0", (name, AlterConfigOpType.DELETE, None))
    assert described(admin, ResourceType.BROKER, "0")[name] == ("60000", ConfigSource.STATIC_BROKER_CONFIG.value)


@pytest.mark.parametrize("resource_type, changes", [
    (ResourceType.TOPIC, [("flush.ms", "soon")]),
    (ResourceType.TOPIC, [("min.cleanable.dirty.ratio", "2")]),
    (ResourceType.TOPIC, [("preallocate", "maybe")]),
    (ResourceType.TOPIC, [("remote.storage.enable", "true")]),  # no tiered storage
    (ResourceType.TOPIC, [("flush.ms", "1000"), ("segment.index.bytes", "1")]),  # the whole resource
    (ResourceType.BROKER, [("sasl.kerberos.min.time.before.relogin", "soon")]),
    (ResourceType.BROKER, [("background.threads", "9"), ("num.io.threads", "0")]),
])
def test_a_bad_value_is_invalid_config_and_stores_nothing(broker, topic_name, resource_type, changes):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    name = topic_name if resource_type == ResourceType.TOPIC else "0"
    before = described(admin, resource_type, name)
    with pytest.raises(KafkaException) as raised:
        incremental(admin, resource_type, name, *[(k, AlterConfigOpType.SET, v) for k, v in changes])
    assert raised.value.args[0].name() == "INVALID_CONFIG"
    assert described(admin, resource_type, name) == before

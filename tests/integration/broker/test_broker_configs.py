"""The broker's dynamic configs (IncrementalAlterConfigs / AlterConfigs on BROKER, as kafka-configs.sh
--entity-type brokers does): topic defaults every topic without its own override follows at once,
num.partitions, validated with Kafka's error codes, persisted, and shown with their source."""

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, \
    NewTopic, ResourceType

from freshet.testing.polling import wait_for
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


def alter_cluster_default(bootstrap, *changes):
    """The cluster-wide level (resource name ""), which confluent-kafka's ConfigResource does not take."""
    with RawConnection(bootstrap) as conn:
        r = conn.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in changes]}], "validate_only": False})
        assert r.responses[0].error_code == 0, r.responses[0].error_message


def alter_broker(admin, name, *changes):
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, op, value in changes])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def described(admin, resource_type, name):
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(10)


def test_topic_defaults_change_live_persist_and_yield_to_topic_overrides(own_broker):
    admin = create_topic(own_broker.bootstrap, "follows-default", 1, {"segment.bytes": "1024"})
    admin.create_topics([NewTopic("own-retention", 1, config={"segment.bytes": "1024",
                                                              "retention.ms": "-1"})])["own-retention"].result(10)
    p = Producer({"bootstrap.servers": own_broker.bootstrap, "linger.ms": 0})
    old = int(time.time() * 1000) - 3_600_000
    for topic in ("follows-default", "own-retention"):
        for _ in range(40):
            p.produce(topic, b"x" * 100, timestamp=old)
            p.flush(10)
    # the cluster-wide default: an hour-old record is past a one-minute retention
    alter_cluster_default(own_broker.bootstrap, ("log.retention.ms", 0, "60000"))
    probe = Consumer({"bootstrap.servers": own_broker.bootstrap, "group.id": "probe"})
    start = lambda topic: probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]  # noqa: E731
    wait_for(lambda: start("follows-default") > 30, what="old segments deleted under the new default")
    assert start("own-retention") == 0  # its own retention.ms wins
    topic_view = described(admin, ResourceType.TOPIC, "follows-default")["retention.ms"]
    assert topic_view.value == "60000" and topic_view.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert described(admin, ResourceType.TOPIC, "own-retention")["retention.ms"].value == "-1"
    # this broker's own level wins over the cluster default; num.partitions applies to new topics
    alter_broker(admin, "0", ("log.retention.ms", AlterConfigOpType.SET, "7200000"),
                 ("num.partitions", AlterConfigOpType.SET, "3"))
    broker_view = described(admin, ResourceType.BROKER, "0")
    assert broker_view["log.retention.ms"].value == "7200000"
    assert broker_view["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not broker_view["log.retention.ms"].is_read_only and broker_view["log.dirs"].is_read_only
    admin.create_topics([NewTopic("default-count")])["default-count"].result(10)
    assert len(admin.list_topics("default-count", timeout=10).topics["default-count"].partitions) == 3
    probe.close()
    own_broker.restart()
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    assert described(admin, ResourceType.TOPIC, "follows-default")["retention.ms"].value == "7200000"
    # DELETE goes back to the level below
    alter_broker(admin, "0", ("log.retention.ms", AlterConfigOpType.DELETE, None))
    assert described(admin, ResourceType.TOPIC, "follows-default")["retention.ms"].value == "60000"


@pytest.mark.parametrize("name, changes, code", [
    ("0", [("log.retention.ms", "soon")], "INVALID_CONFIG"),
    ("0", [("log.cleanup.policy", "shred")], "INVALID_CONFIG"),
    ("0", [("num.partitions", "0")], "INVALID_CONFIG"),
    ("0", [("no.such.config", "1")], "INVALID_CONFIG"),
    ("0", [("log.dirs", "/elsewhere")], "INVALID_REQUEST"),  # read at start-up only
    ("0", [("auto.create.topics.enable", "true")], "INVALID_REQUEST"),
    ("0", [("log.retention.ms", "1000"), ("log.segment.bytes", "1")], "INVALID_CONFIG"),  # the whole resource
])
def test_bad_broker_changes_are_refused_and_change_nothing(broker, name, changes, code):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    before = {k: (v.value, v.source) for k, v in described(admin, ResourceType.BROKER, "0").items()}
    with pytest.raises(KafkaException) as raised:
        alter_broker(admin, name, *[(k, AlterConfigOpType.SET, v) for k, v in changes])
    assert raised.value.args[0].name() == code
    assert {k: (v.value, v.source) for k, v in described(admin, ResourceType.BROKER, "0").items()} == before


def test_the_legacy_alter_configs_replaces_a_level(own_broker):
    with RawConnection(own_broker.bootstrap) as conn:
        def legacy(configs, validate_only=False):
            r = conn.request(33, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
                {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": validate_only})
            return r.responses[0]

        def cluster_level():
            r = conn.request(32, 1, {"resources": [{"resource_type": 4, "resource_name": "",
                                                    "configuration_keys": None}], "include_synonyms": False})
            return {c.name: c.value for c in r.results[0].configs}

        assert legacy({"log.roll.ms": "3600000", "compression.type": "zstd"}, validate_only=True).error_code == 0
        assert cluster_level() == {}
        assert legacy({"log.roll.ms": "3600000", "compression.type": "zstd"}).error_code == 0
        assert cluster_level() == {"log.roll.ms": "3600000", "compression.type": "zstd"}
        assert legacy({"compression.type": "brotli"}).error_code == 40  # INVALID_CONFIG, nothing changed
        assert cluster_level() == {"log.roll.ms": "3600000", "compression.type": "zstd"}
        assert legacy({}).error_code == 0  # the whole level replaced: back to the defaults
        assert cluster_level() == {}
        other = conn.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "7", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "1000"}]}], "validate_only": False})
        assert other.responses[0].error_code == 42  # INVALID_REQUEST: not this broker's id
        assert cluster_level() == {}


def test_kafka_python_alters_and_describes_broker_configs(own_broker):
    """kafka-python's admin client (incremental when the broker serves IncrementalAlterConfigs)."""
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=own_broker.bootstrap)
    try:
        admin.alter_configs([KConfigResource(ConfigResourceType.BROKER, "0", {"log.segment.bytes": "2097152"})])
        described = admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        text = repr(described)
        assert "log.segment.bytes" in text and "2097152" in text
    finally:
        admin.close()
    confluent = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    create_topic(own_broker.bootstrap, "new-default", 1)
    assert described_value(confluent, "new-default", "segment.bytes") == "2097152"


def described_value(admin, topic, name):
    return described(admin, ResourceType.TOPIC, topic)[name].value


def test_describe_configs_reports_the_declared_types_and_documentation(broker, topic_name):
    """DescribeConfigs v3+: each config's type and documentation, a broker's log.* default typed as its topic
    config."""
    create_topic(broker.bootstrap, topic_name, 1, {"min.compaction.lag.ms": "60000"})
    with RawConnection(broker.bootstrap) as conn:
        r = conn.request(32, 4, {"resources": [
            {"resource_type": 2, "resource_name": topic_name, "configuration_keys": None},
            {"resource_type": 4, "resource_name": "0", "configuration_keys": ["log.retention.ms",
                                                                               "log.cleanup.policy", "log.dirs"]}],
            "include_synonyms": False, "include_documentation": True})
    topic, node = ({c.name: c for c in result.configs} for result in r.results)
    assert (topic["min.compaction.lag.ms"].value, topic["min.compaction.lag.ms"].config_source) == ("60000", 1)
    assert {name: topic[name].config_type for name in ("cleanup.policy", "retention.ms", "segment.bytes",
                                                       "compression.type")} == {
        "cleanup.policy": 7, "retention.ms": 5, "segment.bytes": 3, "compression.type": 2}  # LIST LONG INT STRING
    assert all(c.documentation for c in topic.values())
    assert {name: (c.config_type, c.read_only) for name, c in node.items()} == {
        "log.retention.ms": (5, False), "log.cleanup.policy": (7, False), "log.dirs": (2, True)}
    assert all(c.synonyms == () for c in topic.values())  # not asked for


def test_describe_configs_lists_synonyms_when_asked(own_broker):
    """include_synonyms (kafka-configs.sh --describe --all; librdkafka asks for them): every level a value could
    come from, the one that applies first."""
    admin = create_topic(own_broker.bootstrap, "with-synonyms", 1, {"retention.ms": "1000"})
    alter_cluster_default(own_broker.bootstrap, ("log.retention.ms", 0, "60000"))
    with RawConnection(own_broker.bootstrap) as conn:
        r = conn.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": "with-synonyms",
                                                "configuration_keys": ["retention.ms"]}],
                                 "include_synonyms": True, "include_documentation": False})
    [entry] = r.results[0].configs
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("retention.ms", "1000", 1), ("log.retention.ms", "60000", 3), ("log.retention.ms", "604800000", 5)]
    # confluent-kafka keeps a config's synonyms in a dict by name: the last of the two log.retention.ms stays
    synonyms = described(admin, ResourceType.TOPIC, "with-synonyms")["retention.ms"].synonyms
    assert {name: (s.value, s.source) for name, s in synonyms.items()} == {
        "retention.ms": ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        "log.retention.ms": ("604800000", ConfigSource.DEFAULT_CONFIG.value)}

"""Topic configs are declared once (topic_config.CONFIG_DEFS); validation, list-ness, the broker's log.* synonyms,
the LogConfig and the DescribeConfigs answers are derived from the declarations."""

import dataclasses

import pytest

from freshet.broker.config import BrokerConfig
from freshet.broker.topics import dynamic_config
from freshet.broker.topics.dynamic_config import DynamicBrokerConfigs
from freshet.broker.topics.topic_config import (
    CONFIG_DEFS,
    ConfigSource,
    ConfigType,
    InvalidConfigError,
    describe,
    log_config,
    validate_configs,
)
from freshet.log import LogConfig


def test_every_log_setting_is_declared_once_with_the_logs_default():
    fields = [d.field for d in CONFIG_DEFS.values() if d.field is not None]
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(LogConfig))
    assert log_config({}) == LogConfig()
    for d in CONFIG_DEFS.values():
        if d.field is not None:
            assert d.default == str(getattr(LogConfig(), d.field)), d.name


def test_a_topic_override_wins_over_the_broker_default_which_wins_over_kafkas():
    config = log_config({"retention.ms": "1000", "min.compaction.lag.ms": "5000"},
                        {"retention.ms": "2000", "segment.bytes": "4096", "cleanup.policy": "compact"})
    assert (config.retention_ms, config.segment_bytes, config.cleanup_policy) == (1000, 4096, "compact")
    assert config.min_compaction_lag_ms == 5000
    assert config.delete_retention_ms == LogConfig().delete_retention_ms


@pytest.mark.parametrize("name, value, normalized", [
    ("cleanup.policy", "delete, compact", "compact,delete"),
    ("cleanup.policy", "compact,compact", "compact"),
    ("retention.ms", "-1", "-1"),
    ("retention.ms", str(2**63 - 1), str(2**63 - 1)),
    ("segment.bytes", str(2**31 - 1), str(2**31 - 1)),
    ("min.compaction.lag.ms", "0600", "600"),
    ("compression.type", "zstd", "zstd"),
])
def test_values_are_normalized_by_their_type(name, value, normalized):
    assert validate_configs({name: value}) == {name: normalized}


@pytest.mark.parametrize("name, value, message", [
    ("retention.ms", "soon", "retention.ms: 'soon' is not a whole number"),
    ("retention.ms", "-2", "retention.ms: -2 is below the minimum -1"),
    ("message.timestamp.after.max.ms", str(2**63), "is larger than a long"),
    ("segment.bytes", str(2**31), "segment.bytes: 2147483648 is larger than an int"),  # an INT, as in Kafka
    ("segment.bytes", "13", "below the minimum 14"),
    ("cleanup.policy", "shred", "cleanup.policy: 'shred': expected one or more of compact, delete"),
    ("cleanup.policy", " , ", "expected one or more"),
    ("message.timestamp.type", "WallClock", "'WallClock' is not one of CreateTime, LogAppendTime"),
    ("min.compaction.lag.ms", "-1", "min.compaction.lag.ms: -1 is below the minimum 0"),
    ("no.such.config", "1", "unknown topic config 'no.such.config'"),
    # Kafka's other topic configs, which Freshet stores without acting on them
    ("flush.ms", "soon", "flush.ms: 'soon' is not a whole number"),
    ("flush.ms", "-1", "flush.ms: -1 is below the minimum 0"),
    ("flush.messages", "0", "below the minimum 1"),
    ("segment.index.bytes", str(2**31), "larger than an int"),
    ("max.compaction.lag.ms", "0", "below the minimum 1"),
    ("min.cleanable.dirty.ratio", "1.5", "out of range"),
    ("min.cleanable.dirty.ratio", "half", "not a number"),
    ("min.cleanable.dirty.ratio", "nan", "not a finite number"),
    ("preallocate", "yes", "expected value to be either true or false"),
    ("message.format.version", "latest", "expected a Kafka version"),
    ("compression.gzip.level", "0", "out of range"),
    ("compression.zstd.level", "23", "out of range"),
    ("local.retention.ms", "-3", "below the minimum -2"),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"),
    ("unclean.leader.election.enable", "1", "either true or false"),
    ("leader.replication.throttled.replicas", "all", "partition:broker"),
])
def test_bad_values_are_refused_naming_the_config(name, value, message):
    with pytest.raises(InvalidConfigError, match=message):
        validate_configs({"retention.ms": "5", name: value})


def test_the_lists_are_kafkas():
    assert sorted(d.name for d in CONFIG_DEFS.values() if d.is_list) == [
        "cleanup.policy", "follower.replication.throttled.replicas", "leader.replication.throttled.replicas"]
    assert dynamic_config.is_list("log.cleanup.policy") and not dynamic_config.is_list("log.retention.ms")
    assert not dynamic_config.is_list("num.partitions")


def test_the_broker_synonyms_are_kafkas():
    assert dynamic_config.TOPIC_DEFAULTS.items() >= {
        "log.cleanup.policy": "cleanup.policy", "log.retention.ms": "retention.ms",
        "log.retention.bytes": "retention.bytes", "log.segment.bytes": "segment.bytes",
        "log.roll.ms": "segment.ms",
        "message.max.bytes": "max.message.bytes", "log.index.interval.bytes": "index.interval.bytes",
        "log.cleaner.delete.retention.ms": "delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
        "log.message.timestamp.type": "message.timestamp.type",
        "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
        "compression.type": "compression.type",
        "log.flush.interval.ms": "flush.ms", "log.flush.interval.messages": "flush.messages",
        "log.segment.delete.delay.ms": "file.delete.delay.ms", "log.index.size.max.bytes": "segment.index.bytes",
        "log.roll.jitter.ms": "segment.jitter.ms", "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
        "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio", "log.preallocate": "preallocate",
    }.items()
    assert dynamic_config.check("log.roll.ms", "0100") == "100"
    with pytest.raises(InvalidConfigError, match="log.segment.bytes: 1 is below the minimum 14"):
        dynamic_config.check("log.segment.bytes", "1")
    with pytest.raises(InvalidConfigError, match="cannot be updated dynamically"):
        dynamic_config.check("log.dirs", "/elsewhere")
    with pytest.raises(InvalidConfigError, match="unknown broker config"):
        dynamic_config.check("retention.ms", "1")  # the topic's name is not the broker's


def test_describe_a_topic_gives_each_configs_type_source_and_doc():
    inherited = {"segment.bytes": [("log.segment.bytes", "4096", ConfigSource.DYNAMIC_DEFAULT_BROKER)]}
    entries = {e["name"]: e for e in describe({"retention.ms": "1000"}, inherited)}
    assert sorted(entries) == sorted(CONFIG_DEFS)
    assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == ("1000", 1)
    assert (entries["segment.bytes"]["value"], entries["segment.bytes"]["config_source"]) == ("4096", 3)
    assert (entries["delete.retention.ms"]["value"], entries["delete.retention.ms"]["config_source"]) == (
        "86400000", 5)
    types = {name: e["config_type"] for name, e in entries.items()}
    assert types["cleanup.policy"] == ConfigType.LIST == 7
    assert types["retention.ms"] == types["min.compaction.lag.ms"] == ConfigType.LONG == 5
    assert types["segment.bytes"] == types["min.insync.replicas"] == ConfigType.INT == 3
    assert types["compression.type"] == ConfigType.STRING == 2
    assert all(e["documentation"] for e in entries.values())
    assert all(e["synonyms"] == [] for e in entries.values())  # not asked for
    assert [e["name"] for e in describe({}, keys={"segment.ms", "nope"})] == ["segment.ms"]


def test_describe_the_broker_types_its_topic_defaults_as_the_topic_configs(tmp_path):
    dynamic = DynamicBrokerConfigs(str(tmp_path / "broker-configs.json"), 0)
    dynamic.replace(dynamic.CLUSTER, {"log.retention.ms": "60000"})
    dynamic.replace("0", {"num.partitions": "3"})
    config = BrokerConfig(data_dir=str(tmp_path), default_partitions=1)
    entries = {e["name"]: e for e in dynamic.describe(config, "0")}
    assert set(dynamic_config.TOPIC_DEFAULTS) | set(dynamic_config.BROKER_SETTINGS) == set(entries)
    assert (entries["log.retention.ms"]["value"], entries["log.retention.ms"]["config_source"],
            entries["log.retention.ms"]["config_type"]) == ("60000", 3, ConfigType.LONG)
    assert (entries["num.partitions"]["value"], entries["num.partitions"]["config_source"]) == ("3", 2)
    assert (entries["log.dirs"]["value"], entries["log.dirs"]["config_source"]) == (str(tmp_path), 4)
    assert entries["log.dirs"]["read_only"] and not entries["log.cleanup.policy"]["read_only"]
    assert entries["log.cleanup.policy"]["config_type"] == ConfigType.LIST
    assert entries["auto.create.topics.enable"] | {"value": "false", "config_type": ConfigType.BOOLEAN} == \
        entries["auto.create.topics.enable"]
    assert entries["listeners"]["value"] == "PLAINTEXT://127.0.0.1:9092"
    assert entries["advertised.listeners"]["value"] is None  # not set: each listener advertises itself
    assert [e["name"] for e in dynamic.describe(config, dynamic.CLUSTER)] == ["log.retention.ms"]
    assert dynamic.inherited() == {"retention.ms": [("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER)]}


def test_synonyms_list_every_level_a_value_could_come_from_first_applying_first(tmp_path):
    """include_synonyms, as kafka-configs.sh --describe --all shows them: the topic's override, this broker's
    level, the cluster default, then Kafka's default under the broker's name."""
    dynamic = DynamicBrokerConfigs(str(tmp_path / "broker-configs.json"), 0)
    dynamic.replace(dynamic.CLUSTER, {"log.retention.ms": "60000", "num.partitions": "2"})
    dynamic.replace("0", {"log.retention.ms": "7200000"})
    entries = {e["name"]: e for e in describe({"retention.ms": "1000"}, dynamic.inherited(), synonyms=True)}
    assert entries["retention.ms"]["synonyms"] == [
        {"name": "retention.ms", "value": "1000", "source": 1},
        {"name": "log.retention.ms", "value": "7200000", "source": 2},
        {"name": "log.retention.ms", "value": "60000", "source": 3},
        {"name": "log.retention.ms", "value": "604800000", "source": 5}]
    assert entries["min.insync.replicas"]["synonyms"] == [{"name": "min.insync.replicas", "value": "1", "source": 5}]
    config = BrokerConfig(data_dir=str(tmp_path), default_partitions=1)
    node = {e["name"]: e for e in dynamic.describe(config, "0", synonyms=True)}
    assert [(s["value"], s["source"]) for s in node["num.partitions"]["synonyms"]] == [("2", 3), ("1", 4)]
    assert (node["num.partitions"]["value"], node["num.partitions"]["config_source"]) == ("2", 3)
    assert [(s["value"], s["source"]) for s in node["log.retention.ms"]["synonyms"]] == [
        ("7200000", 2), ("60000", 3), ("604800000", 5)]
    cluster = {e["name"]: e for e in dynamic.describe(config, dynamic.CLUSTER, synonyms=True)}
    assert [(s["value"], s["source"]) for s in cluster["log.retention.ms"]["synonyms"]] == [("60000", 3)]


# Kafka's topic configs Freshet accepts, stores and describes without acting on them (docs/features.md)
KAFKA_TOPIC_CONFIGS = {
    "flush.ms": ("12345678", "12345678", ConfigType.LONG, str(2**63 - 1)),
    "flush.messages": ("1000", "1000", ConfigType.LONG, str(2**63 - 1)),
    "file.delete.delay.ms": ("0", "0", ConfigType.LONG, "60000"),
    "segment.index.bytes": ("4096", "4096", ConfigType.INT, str(10 * 1024 * 1024)),
    "segment.jitter.ms": ("100", "100", ConfigType.LONG, "0"),
    "max.compaction.lag.ms": ("3600000", "3600000", ConfigType.LONG, str(2**63 - 1)),
    "min.cleanable.dirty.ratio": ("0.25", "0.25", ConfigType.DOUBLE, "0.5"),
    "preallocate": ("TRUE", "true", ConfigType.BOOLEAN, "false"),
    "message.downconversion.enable": ("false", "false", ConfigType.BOOLEAN, "true"),
    "message.format.version": ("2.8-IV1", "2.8-IV1", ConfigType.STRING, "3.0-IV1"),
    "message.timestamp.difference.max.ms": ("1000", "1000", ConfigType.LONG, str(2**63 - 1)),
    "compression.gzip.level": ("9", "9", ConfigType.INT, "-1"),
    "compression.lz4.level": ("17", "17", ConfigType.INT, "9"),
    "compression.zstd.level": ("-5", "-5", ConfigType.INT, "3"),
    "local.retention.ms": ("-2", "-2", ConfigType.LONG, "-2"),
    "local.retention.bytes": ("1024", "1024", ConfigType.LONG, "-2"),
    "remote.storage.enable": ("false", "false", ConfigType.BOOLEAN, "false"),
    "remote.log.copy.disable": ("true", "true", ConfigType.BOOLEAN, "false"),
    "remote.log.delete.on.disable": ("true", "true", ConfigType.BOOLEAN, "false"),
    "unclean.leader.election.enable": ("True", "true", ConfigType.BOOLEAN, "false"),
    "leader.replication.throttled.replicas": ("0:1, 1:2", "0:1,1:2", ConfigType.LIST, ""),
    "follower.replication.throttled.replicas": ("*", "*", ConfigType.LIST, ""),
}


@pytest.mark.parametrize("name", sorted(KAFKA_TOPIC_CONFIGS))
def test_kafkas_other_topic_configs_are_accepted_and_described_with_kafkas_type_and_default(name):
    given, stored, kind, default = KAFKA_TOPIC_CONFIGS[name]
    assert validate_configs({name: given}) == {name: stored}
    [own] = describe({name: stored}, keys={name})
    assert (own["value"], own["config_source"], own["config_type"]) == (stored, ConfigSource.DYNAMIC_TOPIC, kind)
    [fallback] = describe({}, keys={name})
    assert (fallback["value"], fallback["config_source"]) == (default, ConfigSource.DEFAULT)
    assert log_config({name: stored}) == LogConfig()  # the log does not act on them


def test_kafkas_dynamic_broker_configs_freshet_does_not_act_on_are_checked_stored_and_described(tmp_path):
    assert dynamic_config.check("sasl.kerberos.min.time.before.relogin", "58000") == "58000"
    assert dynamic_config.check("background.threads", "9") == "9"
    assert dynamic_config.check("log.flush.interval.ms", "1000") == "1000"  # flush.ms's synonym
    assert dynamic_config.check("sasl.kerberos.ticket.renew.window.factor", "0.9") == "0.9"
    for name, value, message in [("sasl.kerberos.min.time.before.relogin", "soon", "not a whole number"),
                                 ("background.threads", "0", "below the minimum 1"),
                                 ("sasl.login.refresh.window.factor", "0.2", "out of range"),
                                 ("sasl.login.refresh.buffer.seconds", str(2**15), "larger than a short")]:
        with pytest.raises(InvalidConfigError, match=f"{name}: .*{message}"):
            dynamic_config.check(name, value)
    configs = DynamicBrokerConfigs(str(tmp_path / "broker-configs.json"), 1)
    configs.replace("1", {"sasl.kerberos.min.time.before.relogin": "58000"})
    config = BrokerConfig(data_dir=str(tmp_path))
    entries = {e["name"]: e for e in configs.describe(config, "1")}
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert (relogin["value"], relogin["config_source"], relogin["read_only"]) == (
        "58000", ConfigSource.DYNAMIC_BROKER, False)
    threads = entries["background.threads"]
    assert (threads["value"], threads["config_source"], threads["config_type"]) == (
        "10", ConfigSource.STATIC_BROKER, ConfigType.INT)
    assert (entries["log.flush.interval.ms"]["value"], entries["log.flush.interval.ms"]["config_source"]) == (
        str(2**63 - 1), ConfigSource.DEFAULT)

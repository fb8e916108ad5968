"""Topic-level configuration, declared once: each config's name, type, default, validation, broker-level synonym,
documentation and the LogConfig field it sets, as Kafka's ``ConfigDef`` declares them. Everything else is derived
from ``CONFIG_DEFS``: validation of CreateTopics / AlterConfigs / IncrementalAlterConfigs values, which configs
are lists (APPEND / SUBTRACT), the broker's ``log.*`` defaults (``dynamic_config``), the LogConfig a partition
obeys, and the DescribeConfigs answer (type, documentation, source).

Adding a topic config is one ``ConfigDef`` here (and its LogConfig field, if the log obeys it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable

from freshet.log import LogConfig


class InvalidConfigError(ValueError):
    """A config name or value a topic cannot take (INVALID_CONFIG)."""


class ConfigType(IntEnum):
    """A config's type as DescribeConfigs v3+ reports it (Kafka's ``ConfigDef.Type``)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class ConfigSource(IntEnum):
    """Where a described config's value comes from (DescribeConfigs' ``config_source``)."""

    DYNAMIC_TOPIC = 1  # the topic's own override
    DYNAMIC_BROKER = 2  # this broker's dynamic config
    DYNAMIC_DEFAULT_BROKER = 3  # the cluster-wide dynamic default
    STATIC_BROKER = 4  # what the broker was started with
    DEFAULT = 5  # Kafka's default
    GROUP = 8  # a group's own config


_LARGEST = {ConfigType.SHORT: (2**15 - 1, "a short"), ConfigType.INT: (2**31 - 1, "an int"),
            ConfigType.LONG: (2**63 - 1, "a long")}


def _whole(text: str, kind: ConfigType) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{text!r} is not a whole number") from None
    largest, name = _LARGEST[kind]
    if value > largest:
        raise InvalidConfigError(f"{value} is larger than {name}")
    return value


def _items(text: str) -> list[str]:
    """A LIST value's items: comma-separated, trimmed, empty ones and repeats dropped."""
    return list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def _boolean(text: str) -> str:
    """Kafka's BOOLEAN: true or false in any case, stored lower-case."""
    if str(text).strip().lower() not in ("true", "false"):
        raise InvalidConfigError(f"{text!r}: expected value to be either true or false")
    return str(text).strip().lower()


def _double(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidConfigError(f"{text!r} is not a finite number")
    return value


def at_least(minimum: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < minimum:
            raise InvalidConfigError(f"{value} is below the minimum {minimum}")
        return value

    return check


def between(low: float, high: float) -> Callable[[float], float]:
    def check(value: float) -> float:
        if not low <= value <= high:
            raise InvalidConfigError(f"{value} is out of range ({low} to {high})")
        return value

    return check


def matching(pattern: str, expected: str) -> Callable[[str], str]:
    """A STRING (or a LIST's items joined by commas) that matches ``pattern`` whole."""
    compiled = re.compile(pattern)

    def check(value) -> str:
        text = ",".join(value) if isinstance(value, list) else value
        if not compiled.fullmatch(text):
            raise InvalidConfigError(f"{text!r}: expected {expected}")
        return text

    return check


def refused_when(bad: str, reason: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value == bad:
            raise InvalidConfigError(reason)
        return value

    return check


def one_of(*allowed: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in allowed:
            raise InvalidConfigError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    return check


def some_of(*allowed: str) -> Callable[[list[str]], str]:
    """A non-empty list of ``allowed`` items, normalized to their order in ``allowed``."""

    def check(items: list[str]) -> str:
        if not items or any(i not in allowed for i in items):
            raise InvalidConfigError(f"{','.join(items)!r}: expected one or more of {', '.join(allowed)}")
        return ",".join(a for a in allowed if a in items)

    return check


@dataclass(frozen=True)
class ConfigDef:
    """One topic config. ``validator`` takes the value parsed by its type (an int for INT and LONG, the items
    of a LIST, the text of a STRING) and returns it normalized, or raises InvalidConfigError."""

    name: str
    type: ConfigType
    default: str
    doc: str
    validator: Callable = lambda value: value
    synonym: str | None = None  # the broker config (log.*) whose dynamic value topics without an override take
    field: str | None = None  # the LogConfig field it sets (None: accepted and described, not the log's)

    @property
    def is_list(self) -> bool:
        return self.type is ConfigType.LIST

    def parse(self, text: str) -> str:
        """The value normalized, as stored and described. Raises InvalidConfigError."""
        if self.type in _LARGEST:
            return str(self.validator(_whole(text, self.type)))
        if self.is_list:
            return str(self.validator(_items(text)))
        if self.type is ConfigType.BOOLEAN:
            return str(self.validator(_boolean(text)))
        if self.type is ConfigType.DOUBLE:
            return str(self.validator(_double(text)))
        return str(self.validator(text))

    def typed(self, text: str) -> int | str:
        """A stored (already valid) value as the LogConfig field takes it."""
        return int(text) if self.type in _LARGEST else text


_D = LogConfig()
_STRING, _INT, _LONG, _LIST = ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.LIST
_BOOLEAN, _DOUBLE = ConfigType.BOOLEAN, ConfigType.DOUBLE
_NEVER = str(2**63 - 1)  # Kafka's Long.MAX_VALUE default: "never"
# accepted, stored and described, but Freshet's log does not act on it (docs/features.md lists them and why)
NO_EFFECT = "accepted and described; Freshet does not act on it"


def _log(name: str, kind: ConfigType, field: str, doc: str, validator: Callable, synonym: str) -> ConfigDef:
    """A config the log obeys: its default is LogConfig's."""
    return ConfigDef(name, kind, str(getattr(_D, field)), doc, validator, synonym, field)


# as the controller checks it (controller/state.py)
_THROTTLED_REPLICAS = matching(r"\s*(\*|\d+\s*:\s*\d+(\s*,\s*\d+\s*:\s*\d+)*)?\s*",
                               "* or a list of partition:broker")


def _refuse_level(value: int, expected: str) -> int:
    raise InvalidConfigError(f"{value} is out of range ({expected})")


CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _log("cleanup.policy", _LIST, "cleanup_policy", "delete, compact, or compact,delete",
             some_of("compact", "delete"), "log.cleanup.policy"),
        _log("retention.ms", _LONG, "retention_ms", "delete segments older than this (-1: never)", at_least(-1),
             "log.retention.ms"),
        _log("retention.bytes", _LONG, "retention_bytes", "keep at most this many bytes per partition",
             at_least(-1), "log.retention.bytes"),
        _log("segment.bytes", _INT, "segment_bytes", "roll a segment at this size", at_least(14),
             "log.segment.bytes"),
        _log("segment.ms", _LONG, "segment_ms", "roll a segment after this long", at_least(1), "log.roll.ms"),
        _log("max.message.bytes", _INT, "max_message_bytes", "largest record batch accepted", at_least(0),
             "message.max.bytes"),
        _log("index.interval.bytes", _INT, "index_interval_bytes", "bytes between index entries", at_least(0),
             "log.index.interval.bytes"),
        _log("delete.retention.ms", _LONG, "delete_retention_ms", "how long tombstones are kept", at_least(0),
             "log.cleaner.delete.retention.ms"),
        _log("min.compaction.lag.ms", _LONG, "min_compaction_lag_ms",
             "compaction leaves a segment alone until its newest record is at least this old", at_least(0),
             "log.cleaner.min.compaction.lag.ms"),
        _log("message.timestamp.type", _STRING, "message_timestamp_type",
             "CreateTime: the producer's timestamps; LogAppendTime: the broker's clock when it appends",
             one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
        _log("message.timestamp.before.max.ms", _LONG, "message_timestamp_before_max_ms",
             "CreateTime: refuse records whose timestamp is further than this in the past", at_least(0),
             "log.message.timestamp.before.max.ms"),
        _log("message.timestamp.after.max.ms", _LONG, "message_timestamp_after_max_ms",
             "CreateTime: refuse records whose timestamp is further than this in the future", at_least(0),
             "log.message.timestamp.after.max.ms"),
        _log("compression.type", _STRING, "compression_type",
             "producer: batches stored as produced; a codec: batches in another codec recompressed on append",
             one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "compression.type"),
        ConfigDef("min.insync.replicas", _INT, "1", "one replica: always 1", at_least(1)),
        # Kafka's other topic configs (TopicConfig / LogConfig): Kafka's types, defaults, validators, synonyms
        ConfigDef("flush.ms", _LONG, _NEVER, f"fsync after this long; {NO_EFFECT} (Freshet fsyncs on its own "
                  "schedule)", at_least(0), "log.flush.interval.ms"),
        ConfigDef("flush.messages", _LONG, _NEVER, f"fsync after this many messages; {NO_EFFECT} (Freshet "
                  "fsyncs on its own schedule)", at_least(1), "log.flush.interval.messages"),
        ConfigDef("file.delete.delay.ms", _LONG, "60000", f"wait before deleting a file; {NO_EFFECT}",
                  at_least(0), "log.segment.delete.delay.ms"),
        ConfigDef("segment.index.bytes", _INT, str(10 * 1024 * 1024), f"the offset index's size; {NO_EFFECT}",
                  at_least(4), "log.index.size.max.bytes"),
        ConfigDef("segment.jitter.ms", _LONG, "0", f"random jitter subtracted from segment.ms; {NO_EFFECT}",
                  at_least(0), "log.roll.jitter.ms"),
        ConfigDef("max.compaction.lag.ms", _LONG, _NEVER, f"longest a record stays uncompacted; {NO_EFFECT}",
                  at_least(1), "log.cleaner.max.compaction.lag.ms"),
        ConfigDef("min.cleanable.dirty.ratio", _DOUBLE, "0.5", f"dirty share of a log before compaction; "
                  f"{NO_EFFECT}", between(0, 1), "log.cleaner.min.cleanable.ratio"),
        ConfigDef("preallocate", _BOOLEAN, "false", f"preallocate segment files; {NO_EFFECT}",
                  synonym="log.preallocate"),
        ConfigDef("message.downconversion.enable", _BOOLEAN, "true", f"down-convert for old fetchers; {NO_EFFECT}",
                  synonym="log.message.downconversion.enable"),
        ConfigDef("message.format.version", _STRING, "3.0-IV1", f"deprecated (ignored since Kafka 3.0); "
                  f"{NO_EFFECT}", matching(r"\d+\.\d+(\.\d+)?(-IV\d+)?", "a Kafka version such as 3.0-IV1"),
                  "log.message.format.version"),
        ConfigDef("message.timestamp.difference.max.ms", _LONG, _NEVER, f"deprecated (Kafka 3.6: "
                  f"message.timestamp.before/after.max.ms); {NO_EFFECT}", at_least(0),
                  "log.message.timestamp.difference.max.ms"),
        ConfigDef("compression.gzip.level", _INT, "-1", f"gzip level of recompressed batches; {NO_EFFECT}",
                  lambda v: v if v == -1 or 1 <= v <= 9 else _refuse_level(v, "-1 or 1 to 9"),
                  "compression.gzip.level"),
        ConfigDef("compression.lz4.level", _INT, "9", f"lz4 level of recompressed batches; {NO_EFFECT}",
                  lambda v: v if 1 <= v <= 17 else _refuse_level(v, "1 to 17"), "compression.lz4.level"),
        ConfigDef("compression.zstd.level", _INT, "3", f"zstd level of recompressed batches; {NO_EFFECT}",
                  lambda v: v if -131072 <= v <= 22 else _refuse_level(v, "-131072 to 22"),
                  "compression.zstd.level"),
        ConfigDef("local.retention.ms", _LONG, "-2", f"tiered storage's local retention; {NO_EFFECT}",
                  at_least(-2), "log.local.retention.ms"),
        ConfigDef("local.retention.bytes", _LONG, "-2", f"tiered storage's local retention; {NO_EFFECT}",
                  at_least(-2), "log.local.retention.bytes"),
        ConfigDef("remote.storage.enable", _BOOLEAN, "false", "tiered storage: Freshet has none, true is refused",
                  refused_when("true", "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                               "configured with remote log storage.")),
        ConfigDef("remote.log.copy.disable", _BOOLEAN, "false", f"tiered storage; {NO_EFFECT}"),
        ConfigDef("remote.log.delete.on.disable", _BOOLEAN, "false", f"tiered storage; {NO_EFFECT}"),
        ConfigDef("unclean.leader.election.enable", _BOOLEAN, "false",
                  "elect a replica outside the ISR when no ISR member is alive (a cluster; one broker: no effect)"),
        ConfigDef("leader.replication.throttled.replicas", _LIST, "", "replicas whose leader side the replication "
                  "throttle holds back: * or partition:broker,... (a cluster; one broker: no effect)",
                  _THROTTLED_REPLICAS),
        ConfigDef("follower.replication.throttled.replicas", _LIST, "", "replicas whose follower side the "
                  "replication throttle holds back: * or partition:broker,... (a cluster; one broker: no effect)",
                  _THROTTLED_REPLICAS),
    ]
}


def definition(name: str) -> ConfigDef:
    """The declaration of topic config ``name``. Raises InvalidConfigError for a name no topic takes."""
    found = CONFIG_DEFS.get(name)
    if found is None:
        raise InvalidConfigError(f"unknown topic config {name!r}")
    return found


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Check names and values; return the normalized overrides (None means: back to default)."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        found = definition(name)
        if value is not None:
            try:
                out[name] = found.parse(str(value))
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{name}: {exc}") from None
    return out


def log_config(overrides: dict[str, str], defaults: dict[str, str] | None = None) -> LogConfig:
    """A topic's LogConfig: its own overrides, else the broker's dynamic defaults, else Kafka's defaults."""
    defaults = defaults or {}
    fields = {}
    for name, d in CONFIG_DEFS.items():
        if d.field is not None:
            fields[d.field] = d.typed(overrides.get(name, defaults.get(name, d.default)))
    return LogConfig(**fields)


# where a config's value may come from, the one that applies first: (the name it is set under, value, source)
Chain = list[tuple[str, "str | None", ConfigSource]]


def describe(overrides: Mapping[str, str], inherited: Mapping[str, Chain] | None = None,
             keys: set[str] | None = None, synonyms: bool = False) -> list[dict]:
    """DescribeConfigs' entries for a topic (all its configs, or those in ``keys``), sorted by name: its own
    override, else the value it inherits from the broker's dynamic configs (``inherited``: topic config name ->
    the levels that set its broker synonym, this broker's first), else the default (named by the synonym, as
    Kafka names it). ``synonyms``: each entry lists all of them (include_synonyms)."""
    inherited = inherited or {}
    out = []
    for name, d in sorted(CONFIG_DEFS.items()):
        if keys is not None and name not in keys:
            continue
        chain: Chain = [(name, overrides[name], ConfigSource.DYNAMIC_TOPIC)] if name in overrides else []
        chain += [*inherited.get(name, []), (d.synonym or name, d.default, ConfigSource.DEFAULT)]
        out.append(config_entry(name, chain, d.type, d.doc, synonyms=synonyms))
    return out


def config_entry(name: str, chain: Chain, kind: ConfigType, doc: str | None, read_only: bool = False,
                 synonyms: bool = False) -> dict:
    """One config as DescribeConfigs answers it: the value and source of the first of ``chain`` that sets it,
    and with ``synonyms`` the whole chain (CreateTopics answers the first five fields)."""
    _, value, source = chain[0]
    return {"name": name, "value": value, "read_only": read_only, "config_source": int(source),
            "is_sensitive": False, "config_type": int(kind), "documentation": doc,
            "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in chain] if synonyms else []}

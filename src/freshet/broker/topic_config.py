"""Topic-level configuration: Kafka's names, defaults, validation, and the LogConfig they make."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from freshet.log import LogConfig


class InvalidConfigError(ValueError):
    """A config name or value a topic cannot take (INVALID_CONFIG)."""


def _long(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise InvalidConfigError(f"{value} is below the minimum {minimum}")
        if value > 2**63 - 1:
            raise InvalidConfigError(f"{value} is larger than a long")
        return value

    return parse


def _policy(text: str) -> str:
    parts = sorted({p.strip() for p in text.split(",") if p.strip()})
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise InvalidConfigError(f"cleanup.policy {text!r}: expected delete, compact or compact,delete")
    return ",".join(sorted(parts, key=lambda p: p != "compact"))


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise InvalidConfigError(f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


@dataclass(frozen=True)
class ConfigDef:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str


_D = LogConfig()
CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef("cleanup.policy", _D.cleanup_policy, _policy, "delete, compact, or compact,delete"),
        ConfigDef("retention.ms", str(_D.retention_ms), _long(-1), "delete segments older than this (-1: never)"),
        ConfigDef("retention.bytes", str(_D.retention_bytes), _long(-1), "keep at most this many bytes per partition"),
        ConfigDef("segment.bytes", str(_D.segment_bytes), _long(14), "roll a segment at this size"),
        ConfigDef("segment.ms", str(_D.segment_ms), _long(1), "roll a segment after this long"),
        ConfigDef("max.message.bytes", str(_D.max_message_bytes), _long(0), "largest record batch accepted"),
        ConfigDef("index.interval.bytes", str(_D.index_interval_bytes), _long(0), "bytes between index entries"),
        ConfigDef("delete.retention.ms", str(_D.delete_retention_ms), _long(0), "how long tombstones are kept"),
        ConfigDef("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
                  "CreateTime: the producer's timestamps; LogAppendTime: the broker's clock when it appends"),
        ConfigDef("message.timestamp.before.max.ms", str(_D.message_timestamp_before_max_ms), _long(0),
                  "CreateTime: refuse records whose timestamp is further than this in the past"),
        ConfigDef("message.timestamp.after.max.ms", str(_D.message_timestamp_after_max_ms), _long(0),
                  "CreateTime: refuse records whose timestamp is further than this in the future"),
        ConfigDef("min.insync.replicas", "1", _long(1), "one replica: always 1"),
        ConfigDef("compression.type", "producer",
                  _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                  "producer: batches stored as produced; a codec: batches in another codec recompressed on append"),
        ConfigDef("min.compaction.lag.ms", "0", _long(0), "minimum age before a record can be compacted"),
    ]
}


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Check names and values; return the normalized overrides (None means: back to default)."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        definition = CONFIG_DEFS.get(name)
        if definition is None:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        if value is None:
            continue
        parsed = definition.parse(str(value))
        out[name] = str(parsed)
    return out


def log_config(overrides: dict[str, str], defaults: dict[str, str] | None = None) -> LogConfig:
    """A topic's LogConfig: its own overrides, else the broker's dynamic defaults, else Kafka's defaults."""
    defaults = defaults or {}

    def get(name: str) -> str:
        if name in overrides:
            return overrides[name]
        return defaults.get(name, CONFIG_DEFS[name].default)

    return LogConfig(
        segment_bytes=int(get("segment.bytes")),
        segment_ms=int(get("segment.ms")),
        retention_ms=int(get("retention.ms")),
        retention_bytes=int(get("retention.bytes")),
        cleanup_policy=get("cleanup.policy"),
        max_message_bytes=int(get("max.message.bytes")),
        index_interval_bytes=int(get("index.interval.bytes")),
        delete_retention_ms=int(get("delete.retention.ms")),
        message_timestamp_type=get("message.timestamp.type"),
        compression_type=get("compression.type"),
        message_timestamp_before_max_ms=int(get("message.timestamp.before.max.ms")),
        message_timestamp_after_max_ms=int(get("message.timestamp.after.max.ms")),
    )

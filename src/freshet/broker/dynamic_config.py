"""The broker's dynamic configs: Kafka's ``log.*`` topic defaults and a few broker settings, changed at run
time with IncrementalAlterConfigs / AlterConfigs on the BROKER resource, as ``kafka-configs.sh --alter
--entity-type brokers`` does.

Two levels, as in Kafka: the cluster-wide default (resource name ``""``) and this broker (its node id), the
broker's own winning. A topic without an override of its own takes the new default at once (a shorter
``log.retention.ms`` deletes old segments straight away); stored in ``broker-configs.json`` beside the
topics, written whole and atomically, so a restart keeps them.
"""

from __future__ import annotations

import json
import os

from .durability import write_json_atomically
from .topic_config import CONFIG_DEFS, InvalidConfigError

# broker config -> the topic config it is the default of
TOPIC_DEFAULTS = {
    "log.cleanup.policy": "cleanup.policy",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "message.max.bytes": "max.message.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "compression.type": "compression.type",
}


def _positive(text: str) -> str:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 2**31 - 1:
        raise InvalidConfigError(f"{value} is out of range (1 to {2**31 - 1})")
    return str(value)


# broker settings of their own that may change at run time
BROKER_SETTINGS = {
    "num.partitions": _positive,  # partitions of a topic created without a count
    "log.cleaner.backoff.ms": _positive,  # how often retention and compaction run
}
DYNAMIC = set(TOPIC_DEFAULTS) | set(BROKER_SETTINGS)
# read at start-up only (DescribeConfigs shows them read-only)
STATIC = {"auto.create.topics.enable", "socket.request.max.bytes", "connections.max.idle.ms", "log.dirs",
          "broker.id", "node.id", "listeners", "advertised.listeners"}


def check(name: str, value: str) -> str:
    """A dynamic config's value, normalized. Raises InvalidConfigError (unknown, static or a bad value)."""
    if name in STATIC:
        raise InvalidConfigError(f"{name} cannot be updated dynamically: it is read when the broker starts")
    if name in TOPIC_DEFAULTS:
        return str(CONFIG_DEFS[TOPIC_DEFAULTS[name]].parse(value))
    if name in BROKER_SETTINGS:
        return BROKER_SETTINGS[name](value)
    raise InvalidConfigError(f"unknown broker config {name!r}")


class DynamicBrokerConfigs:
    CLUSTER = ""  # the cluster-wide default's resource name

    def __init__(self, path: str, node_id: int) -> None:
        self.path = path
        self.node = str(node_id)
        self.levels: dict[str, dict[str, str]] = {self.CLUSTER: {}, self.node: {}}
        if os.path.exists(path):
            with open(path) as f:
                stored = json.load(f)
            for level in self.levels:
                self.levels[level] = dict(stored.get(level, {}))

    def effective(self) -> dict[str, str]:
        return {**self.levels[self.CLUSTER], **self.levels[self.node]}

    def source(self, name: str) -> str | None:
        """Where a dynamic value comes from: 'broker', 'cluster', or None (not set dynamically)."""
        if name in self.levels[self.node]:
            return "broker"
        if name in self.levels[self.CLUSTER]:
            return "cluster"
        return None

    def topic_defaults(self) -> dict[str, str]:
        """Topic config name -> the default topics without an override of their own take."""
        return {TOPIC_DEFAULTS[k]: v for k, v in self.effective().items() if k in TOPIC_DEFAULTS}

    def replace(self, level: str, values: dict[str, str]) -> None:
        self.levels[level] = dict(values)
        write_json_atomically(self.path, self.levels)

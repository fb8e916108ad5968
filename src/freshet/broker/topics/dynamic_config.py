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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..durability import write_json_atomically
from .topic_config import (
    CONFIG_DEFS,
    NO_EFFECT,
    ConfigDef,
    ConfigSource,
    ConfigType,
    InvalidConfigError,
    at_least,
    between,
    config_entry,
)

if TYPE_CHECKING:
    from ..config import BrokerConfig

# broker config -> the topic config it is the default of (each topic config's declared synonym)
TOPIC_DEFAULTS = {d.synonym: d.name for d in CONFIG_DEFS.values() if d.synonym is not None}


def _positive(text: str) -> str:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 2**31 - 1:
        raise InvalidConfigError(f"{value} is out of range (1 to {2**31 - 1})")
    return str(value)


# authorizer.class.name with an authorizer: Kafka's own (KRaft) authorizer, whose rules Freshet's follows (ACLs, DENY
# over ALLOW, super.users, allow.everyone.if.no.acl.found); tools tell "ACLs on" from "off" by a non-empty value
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class BrokerSetting:
    """A broker config of its own (not a topic default): its value at start-up, and whether it may change at run
    time (``parse`` checks a new value; None: read when the broker starts, read-only)."""

    name: str
    type: ConfigType
    start_value: Callable[["BrokerConfig"], str | None]
    doc: str
    parse: Callable[[str], str] | None = None


BROKER_SETTINGS: dict[str, BrokerSetting] = {
    s.name: s
    for s in [
        BrokerSetting("num.partitions", ConfigType.INT, lambda c: str(c.default_partitions),
                      "partitions of a topic created without a count", _positive),
        BrokerSetting("log.cleaner.backoff.ms", ConfigType.LONG, lambda c: str(c.cleaner_interval_ms),
                      "how often retention and compaction run", _positive),
        BrokerSetting("auto.create.topics.enable", ConfigType.BOOLEAN,
                      lambda c: str(c.auto_create_topics).lower(),
                      "whether Metadata for an unknown topic creates it"),
        BrokerSetting("socket.request.max.bytes", ConfigType.INT, lambda c: str(c.max_request_bytes),
                      "the largest request accepted"),
        BrokerSetting("connections.max.idle.ms", ConfigType.LONG, lambda c: str(int(c.idle_timeout_s * 1000)),
                      "idle connections are closed after this long"),
        BrokerSetting("log.dirs", ConfigType.STRING, lambda c: c.data_dir, "where the topics are stored"),
        BrokerSetting("broker.id", ConfigType.INT, lambda c: str(c.node_id), "this broker's id"),
        BrokerSetting("node.id", ConfigType.INT, lambda c: str(c.node_id), "this broker's id"),
        BrokerSetting("listeners", ConfigType.STRING,
                      lambda c: ",".join(str(listener) for listener in c.effective_listeners()),
                      "where the broker accepts connections"),
        BrokerSetting("authorizer.class.name", ConfigType.STRING,
                      lambda c: AUTHORIZER_CLASS if c.security.authorizes(c.effective_listeners()) else "",
                      "the authorizer requests are checked by against ACLs (freshet broker start --authorizer); "
                      "empty: none, every client may do everything and the ACL APIs answer SECURITY_DISABLED"),
        BrokerSetting("advertised.listeners", ConfigType.STRING,
                      lambda c: ",".join(f"{listener.protocol}://{c.advertised_host}:{listener.port}"
                                         for listener in c.effective_listeners()) if c.advertised_host else None,
                      "the addresses clients are told (not set: each listener's own)"),
    ]
}


def _accepted(name: str, kind: ConfigType, default: str | None, doc: str,
              validator=lambda value: value) -> BrokerSetting:
    """A broker config Kafka lets AlterConfigs change at run time that Freshet accepts, stores and describes but
    does not act on (Kafka's type, default and validator)."""
    parse = ConfigDef(name, kind, default or "", doc, validator).parse
    return BrokerSetting(name, kind, lambda c: default, f"{doc}; {NO_EFFECT}", parse)


_INT, _LONG, _DOUBLE, _STRING, _LIST = (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.STRING,
                                        ConfigType.LIST)
# Kafka's DynamicBrokerConfig reconfigurables that Freshet has no counterpart of
BROKER_SETTINGS.update((s.name, s) for s in [
    _accepted("sasl.kerberos.min.time.before.relogin", _LONG, "60000", "login thread sleep between refreshes"),
    _accepted("sasl.kerberos.kinit.cmd", _STRING, "/usr/bin/kinit", "Kerberos kinit command path"),
    _accepted("sasl.kerberos.service.name", _STRING, None, "the Kerberos principal name Kafka runs as"),
    _accepted("sasl.kerberos.ticket.renew.jitter", _DOUBLE, "0.05", "random jitter added to the renewal time"),
    _accepted("sasl.kerberos.ticket.renew.window.factor", _DOUBLE, "0.8", "share of the ticket's life before "
              "renewal"),
    _accepted("sasl.kerberos.principal.to.local.rules", _LIST, "DEFAULT", "principal name to short name rules"),
    _accepted("sasl.login.refresh.window.factor", _DOUBLE, "0.8", "OAUTHBEARER: share of the token's life before "
              "refresh", between(0.5, 1.0)),
    _accepted("sasl.login.refresh.window.jitter", _DOUBLE, "0.05", "OAUTHBEARER: random refresh jitter",
              between(0.0, 0.25)),
    _accepted("sasl.login.refresh.min.period.seconds", ConfigType.SHORT, "60", "OAUTHBEARER: least wait "
              "between refreshes", between(0, 900)),
    _accepted("sasl.login.refresh.buffer.seconds", ConfigType.SHORT, "300", "OAUTHBEARER: time kept before "
              "expiry", between(0, 3600)),
    _accepted("background.threads", _INT, "10", "threads of background tasks", at_least(1)),
    _accepted("num.io.threads", _INT, "8", "threads processing requests", at_least(1)),
    _accepted("num.network.threads", _INT, "3", "threads on the network", at_least(1)),
    _accepted("num.replica.fetchers", _INT, "1", "follower fetcher threads per source broker", at_least(1)),
    _accepted("num.recovery.threads.per.data.dir", _INT, "2", "log recovery threads", at_least(1)),
    _accepted("log.cleaner.threads", _INT, "1", "log cleaner threads", at_least(0)),
    _accepted("log.cleaner.io.max.bytes.per.second", _DOUBLE, str(float(2**63 - 1)), "cleaner I/O rate limit"),
    _accepted("log.cleaner.dedupe.buffer.size", _LONG, str(128 * 1024 * 1024), "cleaner dedupe memory"),
    _accepted("log.cleaner.io.buffer.size", _INT, str(512 * 1024), "cleaner I/O buffer memory", at_least(0)),
    _accepted("log.cleaner.io.buffer.load.factor", _DOUBLE, "0.9", "cleaner dedupe buffer load factor"),
    _accepted("max.connections", _INT, str(2**31 - 1), "connections allowed at once", at_least(0)),
    _accepted("max.connections.per.ip", _INT, str(2**31 - 1), "connections allowed per address", at_least(0)),
    _accepted("max.connection.creation.rate", _INT, str(2**31 - 1), "new connections per second", at_least(0)),
    _accepted("producer.id.expiration.ms", _INT, "86400000", "idle producer ids expire after this long",
              at_least(1)),
    _accepted("metric.reporters", _LIST, "", "metrics reporter classes"),
])
DYNAMIC = set(TOPIC_DEFAULTS) | {name for name, s in BROKER_SETTINGS.items() if s.parse is not None}
# read at start-up only (DescribeConfigs shows them read-only)
STATIC = {name for name, s in BROKER_SETTINGS.items() if s.parse is None}


def check(name: str, value: str) -> str:
    """A dynamic config's value, normalized. Raises InvalidConfigError (unknown, static or a bad value)."""
    if name in STATIC:
        raise InvalidConfigError(f"{name} cannot be updated dynamically: it is read when the broker starts")
    if name in TOPIC_DEFAULTS:
        parse = CONFIG_DEFS[TOPIC_DEFAULTS[name]].parse
    elif name in BROKER_SETTINGS:
        parse = BROKER_SETTINGS[name].parse
    else:
        raise InvalidConfigError(f"unknown broker config {name!r}")
    try:
        return parse(value)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{name}: {exc}") from None


def is_list(name: str) -> bool:
    """Whether a broker config is a list (APPEND and SUBTRACT apply): the default of a list topic config."""
    return name in TOPIC_DEFAULTS and CONFIG_DEFS[TOPIC_DEFAULTS[name]].is_list


def default(name: str) -> str | None:
    """A topic default's value when no level sets it (Kafka's default of the topic config)."""
    return CONFIG_DEFS[TOPIC_DEFAULTS[name]].default if name in TOPIC_DEFAULTS else None


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

    def chain(self, name: str, level: str | None = None) -> list[tuple[str, str, ConfigSource]]:
        """The dynamic levels that set broker config ``name``, the one that applies first: this broker's, then
        the cluster default (``level``: the cluster default only)."""
        levels = [(self.node, ConfigSource.DYNAMIC_BROKER)] if level != self.CLUSTER else []
        levels.append((self.CLUSTER, ConfigSource.DYNAMIC_DEFAULT_BROKER))
        return [(name, self.levels[at][name], source) for at, source in levels if name in self.levels[at]]

    def inherited(self) -> dict[str, list[tuple[str, str, ConfigSource]]]:
        """Topic config name -> the dynamic levels its broker synonym is set at (see ``chain``): what topics
        without an override take, and its DescribeConfigs source."""
        return {topic: chain for synonym, topic in TOPIC_DEFAULTS.items() if (chain := self.chain(synonym))}

    def describe(self, config: "BrokerConfig", level: str, keys: set[str] | None = None,
                 synonyms: bool = False) -> list[dict]:
        """DescribeConfigs of a BROKER resource, sorted by name: this broker (its id) shows every config with its
        source (its level, the cluster default, what it was started with, Kafka's default); the cluster default
        ("") only what is set dynamically at that level, as Kafka does."""
        names = set(self.levels[level]) if level == self.CLUSTER else (
            set(TOPIC_DEFAULTS) | set(BROKER_SETTINGS) | set(self.effective()))
        out = []
        for name in sorted(names):
            if keys is not None and name not in keys:
                continue
            chain = self.chain(name, level)
            if name in TOPIC_DEFAULTS:
                topic_config = CONFIG_DEFS[TOPIC_DEFAULTS[name]]
                kind, doc = topic_config.type, topic_config.doc
                fallback = (name, topic_config.default, ConfigSource.DEFAULT)
            elif name in BROKER_SETTINGS:
                setting = BROKER_SETTINGS[name]
                kind, doc = setting.type, setting.doc
                fallback = (name, setting.start_value(config), ConfigSource.STATIC_BROKER)
            else:  # stored by an older version, no longer known
                kind, doc, fallback = ConfigType.STRING, None, None
            if level != self.CLUSTER and fallback is not None:
                chain.append(fallback)
            out.append(config_entry(name, chain, kind, doc, read_only=name not in DYNAMIC, synonyms=synonyms))
        return out

    def replace(self, level: str, values: dict[str, str]) -> None:
        self.levels[level] = dict(values)
        write_json_atomically(self.path, self.levels)

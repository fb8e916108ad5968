"""The cluster metadata and its state machine: what every controller holds, changed only by ``apply``.

``ClusterMetadata.apply(command)`` is deterministic (no clock, no random number, no I/O: everything comes in
the command) and either changes the metadata and answers ``Result()`` (error ``NONE``) or refuses with the
error a Kafka controller answers (DUPLICATE_BROKER_REGISTRATION, INVALID_REPLICATION_FACTOR,
FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...) and changes nothing: every check runs before the first
change. The Raft layer (``controller.node``) applies the same commands in the same order on every node.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from . import commands as c
from .placement import AssignmentError, check_added, check_assignment, place_replicas_rack_aware

NO_LEADER = -1
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Result:
    """A command's answer: ``error`` is Kafka's error name (``NONE`` when applied), ``value`` what it made."""

    error: str = "NONE"
    message: str = ""
    value: Any = None

    @property
    def ok(self) -> bool:
        return self.error == "NONE"

    @property
    def error_code(self) -> int:
        return 0 if self.ok else ErrorCode[self.error.lower()].value

    def to_dict(self) -> dict:
        return {"error": self.error, "error_code": self.error_code, "message": self.message, "value": self.value}


def _refuse(error: str, message: str) -> Result:
    ErrorCode[error.lower()]  # a name Kafka knows, or a KeyError in the tests
    return Result(error, message)


@dataclass
class Broker:
    broker_id: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None
    epoch: int
    last_heartbeat_ms: int
    fenced: bool = True  # registered brokers are fenced until their first heartbeat, as in KRaft
    session_closed: bool = False  # its session connection closed (CloseBrokerSession): no session to protect
    shutting_down: bool = False  # in controlled shutdown: leads nothing new, joins no ISR, takes no new replica


@dataclass
class PartitionState:
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # a reassignment in progress (KIP-455): replicas is then the target followed by the removing ones
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass
class Topic:
    topic_id: str
    name: str
    partitions: list[PartitionState]


@dataclass
class ClusterMetadata:
    """All of the cluster's metadata. ``offset`` counts the commands applied (a refused one changes nothing,
    this count included): the metadata version, and the source of broker epochs (as Kafka's broker epoch is
    the offset of its registration record)."""

    brokers: dict[int, Broker] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)  # by topic id
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # by topic name
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # "" = cluster default
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # by group id (share groups' share.*)
    users: dict[str, dict[str, dict]] = field(default_factory=dict)  # user -> mechanism -> credential
    acls: list[dict[str, str]] = field(default_factory=list)
    quotas: dict[tuple, dict[str, float]] = field(default_factory=dict)
    offset: int = 0
    controller_id: int = -1  # the last active controller that announced itself (LeaderChange)
    controller_epoch: int = 0  # its Raft term
    next_producer_id: int = 0  # the first producer id no broker has been given (AllocateProducerIds)

    def __setstate__(self, state: dict) -> None:
        """Unpickled from a Raft snapshot (pysyncobj pickles the metadata): one written by an older version lacks
        the fields added since (``group_configs``), which start at their defaults rather than fail every read."""
        self.__dict__.update({**ClusterMetadata().__dict__, **state})

    # -- reading -------------------------------------------------------------------------------------------
    def topic_by_name(self, name: str) -> Topic | None:
        return next((t for t in self.topics.values() if t.name == name), None)

    def unfenced(self) -> list[int]:
        """The brokers that may lead, join an ISR and take new replicas: unfenced and not shutting down."""
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced and not b.shutting_down)

    def snapshot(self) -> dict:
        """A JSON-able copy of everything: what Metadata and DescribeCluster will answer."""
        return {
            "offset": self.offset,
            "controller_epoch": self.controller_epoch,
            "controller_id": self.controller_id,
            "brokers": [asdict(b) for b in sorted(self.brokers.values(), key=lambda b: b.broker_id)],
            "topics": [
                {
                    "topic_id": t.topic_id,
                    "name": t.name,
                    "partitions": [{"partition": i, **asdict(p)} for i, p in enumerate(t.partitions)],
                    "configs": dict(self.topic_configs.get(t.name, {})),
                }
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
            "broker_configs": copy.deepcopy(self.broker_configs),
            "group_configs": copy.deepcopy(self.group_configs),
            "users": {u: sorted(m) for u, m in sorted(self.users.items())},
            # the brokers' SCRAM credentials (salted and hashed, never a password), as each broker stores them
            "scram_credentials": copy.deepcopy(self.users),
            "acls": copy.deepcopy(self.acls),
            "quotas": [{"entity": [list(p) for p in e], "values": dict(v)} for e, v in self.quotas.items()],
        }

    # -- applying ------------------------------------------------------------------------------------------
    def apply(self, command: c.Command) -> Result:
        handler = getattr(self, "_" + type(command).__name__, None)
        if handler is None:
            return _refuse("INVALID_REQUEST", f"unknown command {type(command).__name__}")
        result = handler(command)
        if result.ok:
            self.offset += 1
        return result

    def _LeaderChange(self, cmd: c.LeaderChange) -> Result:
        if cmd.term <= self.controller_epoch:
            return _refuse(
                "STALE_CONTROLLER_EPOCH", f"controller epoch {cmd.term} is not above {self.controller_epoch}"
            )
        self.controller_id, self.controller_epoch = cmd.node_id, cmd.term
        return Result()

    def _RegisterBroker(self, cmd: c.RegisterBroker) -> Result:
        if cmd.broker_id < 0:
            return _refuse("INVALID_REQUEST", f"broker id {cmd.broker_id} is negative")
        old = self.brokers.get(cmd.broker_id)
        if old is not None and old.incarnation_id == cmd.incarnation_id:
            return Result(value={"broker_epoch": old.epoch})  # the same process retrying: same epoch
        if old is not None and not old.session_closed and cmd.now_ms - old.last_heartbeat_ms < cmd.session_timeout_ms:
            return _refuse(
                "DUPLICATE_BROKER_REGISTRATION",
                f"broker {cmd.broker_id} is registered by another incarnation ({old.incarnation_id}) whose "
                "session has not expired",
            )
        if old is not None and not old.fenced:
            self._fence(cmd.broker_id)  # the old incarnation's session expired: its leaderships move first
        epoch = self.offset + 1
        self.brokers[cmd.broker_id] = Broker(
            cmd.broker_id, cmd.incarnation_id, cmd.host, cmd.port, cmd.rack, epoch, cmd.now_ms, fenced=True
        )
        return Result(value={"broker_epoch": epoch})

    def _check_broker(self, broker_id: int, broker_epoch: int) -> Result | None:
        broker = self.brokers.get(broker_id)
        if broker is None:
            return _refuse("BROKER_ID_NOT_REGISTERED", f"broker {broker_id} is not registered")
        if broker.epoch != broker_epoch:
            return _refuse(
                "STALE_BROKER_EPOCH", f"broker {broker_id}'s epoch is {broker.epoch}, not {broker_epoch}"
            )
        return None

    def _BrokerHeartbeat(self, cmd: c.BrokerHeartbeat) -> Result:
        if refused := self._check_broker(cmd.broker_id, cmd.broker_epoch):
            return refused
        broker = self.brokers[cmd.broker_id]
        broker.last_heartbeat_ms = max(broker.last_heartbeat_ms, cmd.now_ms)
        broker.session_closed = False
        if broker.fenced and not cmd.want_fence:
            broker.fenced = False
            self._elect_offline()
        elif not broker.fenced and cmd.want_fence:
            self._fence(cmd.broker_id)
        return Result(value={"fenced": broker.fenced})

    def _CloseBrokerSession(self, cmd: c.CloseBrokerSession) -> Result:
        if refused := self._check_broker(cmd.broker_id, cmd.broker_epoch):
            return refused
        if not self.brokers[cmd.broker_id].fenced:
            self._fence(cmd.broker_id)
        self.brokers[cmd.broker_id].session_closed = True  # a new incarnation may register at once
        return Result(value={"fenced": True})

    def _UnregisterBroker(self, cmd: c.UnregisterBroker) -> Result:
        if cmd.broker_id not in self.brokers:
            return _refuse("BROKER_ID_NOT_REGISTERED", f"broker {cmd.broker_id} is not registered")
        self._fence(cmd.broker_id)
        del self.brokers[cmd.broker_id]
        return Result()

    def _FenceStaleBrokers(self, cmd: c.FenceStaleBrokers) -> Result:
        stale = sorted(
            b.broker_id for b in self.brokers.values()
            if not b.fenced and b.last_heartbeat_ms + cmd.session_timeout_ms < cmd.now_ms
        )
        for broker_id in stale:
            self._fence(broker_id)
        return Result(value={"fenced": stale})

    def _fence(self, broker_id: int) -> None:
        """The broker leaves every ISR it is in (unless it is the last member: with unclean election off, the
        last ISR member is the one replica that may lead again) and every leadership it has moves to the next
        live ISR member, or to none (offline partition)."""
        self.brokers[broker_id].fenced = True
        live = set(self.unfenced())
        for topic in self.topics.values():
            for part in topic.partitions:
                if broker_id not in part.isr and part.leader != broker_id:
                    continue
                changed = False
                if broker_id in part.isr and len(part.isr) > 1:
                    part.isr = [r for r in part.isr if r != broker_id]
                    changed = True
                if part.leader == broker_id:
                    part.leader = self._choose_leader(topic.name, part, live)
                    part.leader_epoch += 1
                    changed = True
                if changed:
                    part.partition_epoch += 1

    def _choose_leader(self, topic: str, part: PartitionState, live: set[int]) -> int:
        """The first live ISR member in replica order; when there is none and the topic's (or the cluster's)
        ``unclean.leader.election.enable`` is true, the first live replica, which becomes the whole ISR."""
        leader = next((r for r in part.replicas if r in part.isr and r in live), NO_LEADER)
        if leader == NO_LEADER and self._unclean_allowed(topic):
            leader = next((r for r in part.replicas if r in live), NO_LEADER)
            if leader != NO_LEADER:
                part.isr = [leader]
        return leader

    def _unclean_allowed(self, topic: str) -> bool:
        key = "unclean.leader.election.enable"
        value = self.topic_configs.get(topic, {}).get(key, self.broker_configs.get("", {}).get(key, "false"))
        return value.lower() == "true"

    def _elect_offline(self) -> None:
        """Partitions without a leader whose ISR has a live member get it as leader."""
        live = set(self.unfenced())
        for topic in self.topics.values():
            for part in topic.partitions:
                if part.leader != NO_LEADER:
                    continue
                leader = self._choose_leader(topic.name, part, live)
                if leader != NO_LEADER:
                    part.leader = leader
                    part.leader_epoch += 1
                    part.partition_epoch += 1

    def _CreateTopic(self, cmd: c.CreateTopic) -> Result:
        if not _TOPIC_NAME.match(cmd.name) or cmd.name in (".", ".."):
            return _refuse(
                "INVALID_TOPIC_EXCEPTION",
                f"topic name {cmd.name!r} is not 1-249 characters of ASCII letters, digits, '.', '_', '-'",
            )
        if self.topic_by_name(cmd.name) is not None:
            return _refuse("TOPIC_ALREADY_EXISTS", f"topic {cmd.name!r} already exists")
        if cmd.topic_id in self.topics:
            return _refuse("INVALID_REQUEST", f"topic id {cmd.topic_id} is taken")
        live = self.unfenced()
        if cmd.assignment:
            assignment = [list(r) for r in cmd.assignment]
            if cmd.partitions not in (-1, len(assignment)) or cmd.replication_factor not in (
                    -1, len(assignment[0])):
                return _refuse("INVALID_REQUEST", "give either a replica assignment or partitions and a "
                               "replication factor")
            if refused := self._check_assignment(assignment, None, 0):
                return refused
        else:
            if cmd.partitions < 1:
                return _refuse("INVALID_PARTITIONS",
                               f"number of partitions must be at least 1, not {cmd.partitions}")
            if cmd.replication_factor < 1 or cmd.replication_factor > len(live):
                return _refuse(
                    "INVALID_REPLICATION_FACTOR",
                    f"replication factor {cmd.replication_factor} is not between 1 and the {len(live)} "
                    "unfenced broker(s)",
                )
            assignment = None
        if refused := _check_topic_configs(cmd.configs):
            return refused
        if assignment is None:
            assignment = self._place(live, cmd.partitions, cmd.replication_factor, cmd.start_index, cmd.shift)
        self.topics[cmd.topic_id] = Topic(
            cmd.topic_id, cmd.name,
            [_new_partition(r, live) for r in assignment],
        )
        if cmd.configs:
            self.topic_configs[cmd.name] = dict(cmd.configs)
        return Result(value={"topic_id": cmd.topic_id, "assignment": assignment})

    def _DeleteTopic(self, cmd: c.DeleteTopic) -> Result:
        topic = self.topic_by_name(cmd.name)
        if topic is None:
            return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"topic {cmd.name!r} does not exist")
        del self.topics[topic.topic_id]
        self.topic_configs.pop(cmd.name, None)
        return Result()

    def _CreatePartitions(self, cmd: c.CreatePartitions) -> Result:
        topic = self.topic_by_name(cmd.name)
        if topic is None:
            return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"topic {cmd.name!r} does not exist")
        current = len(topic.partitions)
        if cmd.count <= current:
            return _refuse(
                "INVALID_PARTITIONS", f"topic {cmd.name!r} has {current} partitions; the new count must be larger"
            )
        live = self.unfenced()
        first = topic.partitions[0]
        factor = len(first.replicas) - len(first.removing_replicas)  # its target's, while it is being moved
        if cmd.assignment:
            assignment = [list(r) for r in cmd.assignment]
            if refused := self._check_assignment(assignment, factor, current, cmd.name, cmd.count - current):
                return refused
        elif factor > len(live):
            return _refuse(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {factor} is above the {len(live)} unfenced broker(s)",
            )
        else:
            assignment = self._place(live, cmd.count, factor, cmd.start_index, cmd.shift)[current:]
        topic.partitions.extend(_new_partition(r, live) for r in assignment)
        return Result(value={"assignment": assignment})

    def _AllocateProducerIds(self, cmd: c.AllocateProducerIds) -> Result:
        if refused := self._check_broker(cmd.broker_id, cmd.broker_epoch):
            return refused
        if not 1 <= cmd.count <= 1_000_000:
            return _refuse("INVALID_REQUEST", f"a block of {cmd.count} producer ids is not 1 to 1000000")
        start = self.next_producer_id
        self.next_producer_id += cmd.count
        return Result(value={"start": start, "count": cmd.count})

    def _AlterPartition(self, cmd: c.AlterPartition) -> Result:
        if refused := self._check_broker(cmd.broker_id, cmd.broker_epoch):
            return refused
        topic = self.topics.get(cmd.topic_id)
        if topic is None:
            return _refuse("UNKNOWN_TOPIC_ID", f"no topic has id {cmd.topic_id}")
        if not 0 <= cmd.partition < len(topic.partitions):
            return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"{topic.name} has no partition {cmd.partition}")
        part = topic.partitions[cmd.partition]
        where = f"{topic.name}-{cmd.partition}"
        if part.leader != cmd.broker_id:
            return _refuse("NOT_LEADER_OR_FOLLOWER", f"broker {cmd.broker_id} does not lead {where}")
        if cmd.leader_epoch != part.leader_epoch:
            return _refuse(
                "FENCED_LEADER_EPOCH", f"{where}'s leader epoch is {part.leader_epoch}, not {cmd.leader_epoch}"
            )
        if cmd.partition_epoch != part.partition_epoch:
            return _refuse(
                "INVALID_UPDATE_VERSION",
                f"{where}'s partition epoch is {part.partition_epoch}, not {cmd.partition_epoch}",
            )
        new_isr = list(cmd.new_isr)
        if len(set(new_isr)) != len(new_isr) or cmd.broker_id not in new_isr:
            return _refuse("INVALID_REQUEST", f"ISR {new_isr} must hold the leader {cmd.broker_id}, once each")
        if not set(new_isr) <= set(part.replicas):
            return _refuse("INVALID_REQUEST", f"ISR {new_isr} is not among {where}'s replicas {part.replicas}")
        live = set(self.unfenced())
        ineligible = [r for r in new_isr if r not in part.isr and r not in live]
        if ineligible:
            return _refuse("INELIGIBLE_REPLICA", f"broker(s) {ineligible} are fenced and may not join the ISR")
        part.isr = [r for r in part.replicas if r in new_isr]
        part.partition_epoch += 1
        self._complete_reassignment(topic.name, part)  # the last target replica joined the ISR: done
        return Result(value={"isr": list(part.isr), "partition_epoch": part.partition_epoch})

    def _ElectLeaders(self, cmd: c.ElectLeaders) -> Result:
        topic = self.topic_by_name(cmd.topic)
        if topic is None or not 0 <= cmd.partition < len(topic.partitions):
            return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"no partition {cmd.topic}-{cmd.partition}")
        part = topic.partitions[cmd.partition]
        live = set(self.unfenced())
        if cmd.election_type == "preferred":
            preferred = part.replicas[0]
            if part.leader == preferred:
                return _refuse("ELECTION_NOT_NEEDED", f"broker {preferred} already leads")
            if preferred not in part.isr or preferred not in live:
                return _refuse("PREFERRED_LEADER_NOT_AVAILABLE", f"broker {preferred} is not a live ISR member")
            part.leader = preferred
            part.isr = [r for r in part.replicas if r in part.isr]
        elif cmd.election_type == "unclean":
            if part.leader != NO_LEADER:
                return _refuse("ELECTION_NOT_NEEDED", f"broker {part.leader} leads")
            candidate = next((r for r in part.replicas if r in live), NO_LEADER)
            if candidate == NO_LEADER:
                return _refuse("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"no replica of {part.replicas} is live")
            part.leader = candidate
            part.isr = [candidate]
        else:
            return _refuse("INVALID_REQUEST", f"election type {cmd.election_type!r} is not preferred or unclean")
        part.leader_epoch += 1
        part.partition_epoch += 1
        return Result(value={"leader": part.leader, "leader_epoch": part.leader_epoch})

    def _AlterConfigs(self, cmd: c.AlterConfigs) -> Result:
        if cmd.resource_type == "topic":
            if self.topic_by_name(cmd.name) is None:
                return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"topic {cmd.name!r} does not exist")
            if refused := _check_topic_configs(cmd.set):
                return refused
            store = self.topic_configs
        elif cmd.resource_type == "broker":
            if cmd.name != "" and not (cmd.name.isdigit() and int(cmd.name) in self.brokers):
                return _refuse("INVALID_REQUEST", f"broker {cmd.name!r} is not registered")
            shared = ("min.insync.replicas", "unclean.leader.election.enable", *_THROTTLE_RATES)
            if refused := _check_topic_configs({k: v for k, v in cmd.set.items() if k in shared}):
                return refused
            store = self.broker_configs
        elif cmd.resource_type == "group":  # a group's configs, whether or not it exists yet (as Kafka's)
            if not cmd.name:
                return _refuse("INVALID_GROUP_ID", "the group id must not be empty")
            store = self.group_configs
        else:
            return _refuse("INVALID_REQUEST", f"resource type {cmd.resource_type!r} is not topic, broker or group")
        configs = {k: v for k, v in store.get(cmd.name, {}).items() if k not in cmd.delete}
        configs.update(cmd.set)
        if configs:
            store[cmd.name] = configs
        else:
            store.pop(cmd.name, None)
        return Result()

    def _UpsertScramCredential(self, cmd: c.UpsertScramCredential) -> Result:
        if cmd.mechanism not in _SCRAM_MECHANISMS:
            return _refuse("UNSUPPORTED_SASL_MECHANISM", f"{cmd.mechanism!r} is not one of {_SCRAM_MECHANISMS}")
        if not cmd.user:
            return _refuse("INVALID_REQUEST", "user name is empty")
        if cmd.iterations < 4096:
            return _refuse("INVALID_REQUEST", f"{cmd.iterations} iterations is below SCRAM's minimum of 4096")
        self.users.setdefault(cmd.user, {})[cmd.mechanism] = {
            "iterations": cmd.iterations, "salt": cmd.salt, "stored_key": cmd.stored_key,
            "server_key": cmd.server_key,
        }
        return Result()

    def _DeleteScramCredential(self, cmd: c.DeleteScramCredential) -> Result:
        if cmd.mechanism not in self.users.get(cmd.user, {}):
            return _refuse("RESOURCE_NOT_FOUND", f"user {cmd.user!r} has no {cmd.mechanism} credential")
        del self.users[cmd.user][cmd.mechanism]
        if not self.users[cmd.user]:
            del self.users[cmd.user]
        return Result()

    def _CreateAcl(self, cmd: c.CreateAcl) -> Result:
        binding = asdict(cmd)
        if any(not v for v in binding.values()):
            return _refuse("INVALID_REQUEST", "every field of an ACL binding is required")
        if binding not in self.acls:
            self.acls.append(binding)
        return Result()

    def _DeleteAcls(self, cmd: c.DeleteAcls) -> Result:
        wanted = {k: v for k, v in asdict(cmd).items() if v is not None}
        removed = [a for a in self.acls if all(a[k] == v for k, v in wanted.items())]
        self.acls = [a for a in self.acls if a not in removed]
        return Result(value={"deleted": removed})

    def _AlterClientQuota(self, cmd: c.AlterClientQuota) -> Result:
        kinds = [k for k, _ in cmd.entity]
        if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= {"user", "client-id", "ip"}:
            return _refuse("INVALID_REQUEST", f"entity {cmd.entity} is not of user, client-id, ip (each once)")
        if cmd.value is not None and cmd.value <= 0:
            return _refuse("INVALID_REQUEST", f"quota {cmd.key} must be positive, not {cmd.value}")
        entity = tuple(sorted(cmd.entity))
        values = dict(self.quotas.get(entity, {}))
        if cmd.value is None:
            values.pop(cmd.key, None)
        else:
            values[cmd.key] = cmd.value
        if values:
            self.quotas[entity] = values
        else:
            self.quotas.pop(entity, None)
        return Result()

    def _check_assignment(self, assignment: list[list[int]], factor: int | None, first: int, topic: str = "",
                          added: int | None = None) -> Result | None:
        """A manual replica assignment's refusal (INVALID_REPLICA_ASSIGNMENT), or None: ``check_assignment``
        against the registered and the unfenced brokers (and, given ``added``, one per partition added)."""
        try:
            if added is not None:
                check_added(topic, added, len(assignment))
            check_assignment(assignment, self.brokers, self.unfenced(), factor, first)
        except AssignmentError as exc:
            return _refuse("INVALID_REPLICA_ASSIGNMENT", str(exc))
        return None

    # -- brokers joining and leaving (controlled shutdown, leader balance, decommission) ---------------------
    def _place(self, live: list[int], partitions: int, factor: int, start_index: int, shift: int) -> list[list[int]]:
        """Kafka's rack-aware assignment once any live broker has a rack (``broker.rack``), else rack-unaware."""
        racks = {b: self.brokers[b].rack for b in live}
        if any(racks.values()):
            return place_replicas_rack_aware(racks, partitions, factor, start_index, shift)
        return place_replicas(live, partitions, factor, start_index, shift)

    def _ControlledShutdown(self, cmd: c.ControlledShutdown) -> Result:
        """A broker about to stop (SIGTERM): every partition it leads goes to the next live ISR member in replica
        order (leader epoch + 1), it leaves every ISR it is not the last member of, and from now on it is not
        chosen as a leader nor let into an ISR (``unfenced()`` leaves it out) until it registers again. A
        leadership no other live ISR member can take stays (the value's ``kept``): moving it would make the
        partition offline or unclean; the broker gives it up when it exits."""
        if refused := self._check_broker(cmd.broker_id, cmd.broker_epoch):
            return refused
        self.brokers[cmd.broker_id].shutting_down = True
        live = set(self.unfenced())
        kept = []
        for topic in self.topics.values():
            for index, part in enumerate(topic.partitions):
                changed = False
                if part.leader == cmd.broker_id:
                    successor = next((r for r in part.replicas if r in part.isr and r in live), NO_LEADER)
                    if successor == NO_LEADER:
                        kept.append(f"{topic.name}-{index}")
                    else:
                        part.leader = successor
                        part.leader_epoch += 1
                        changed = True
                if cmd.broker_id in part.isr and part.leader != cmd.broker_id and len(part.isr) > 1:
                    part.isr = [r for r in part.isr if r != cmd.broker_id]
                    changed = True
                if changed:
                    part.partition_epoch += 1
        return Result(value={"kept": kept})

    # -- partition reassignment (KIP-455) ------------------------------------------------------------------
    def _AlterPartitionReassignment(self, cmd: c.AlterPartitionReassignment) -> Result:
        """Starts (or replaces) a partition's reassignment, or cancels it. The replicas become the target followed
        by the original replicas leaving (``removing_replicas``); the target's new ones (``adding_replicas``)
        follow the leader, and the AlterPartition that brings the last of them into the ISR completes it
        (``_complete_reassignment``). A new target while one is in progress starts again from the original
        replicas, as Kafka's. Refusals: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, a replica
        twice, a broker not registered; a cancel that needs an unclean election),
        INVALID_REPLICATION_FACTOR (another size when not allowed), NO_REASSIGNMENT_IN_PROGRESS."""
        topic = self.topic_by_name(cmd.topic)
        if topic is None or not 0 <= cmd.partition < len(topic.partitions):
            return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"no partition {cmd.topic}-{cmd.partition}")
        part = topic.partitions[cmd.partition]
        where = f"{cmd.topic}-{cmd.partition}"
        original = [r for r in part.replicas if r not in part.adding_replicas]
        if cmd.cancel:
            if not part.adding_replicas and not part.removing_replicas:
                return _refuse("NO_REASSIGNMENT_IN_PROGRESS", f"no reassignment of {where} is in progress")
            isr = [r for r in original if r in part.isr]
            if not isr and not self._unclean_allowed(topic.name):
                return _refuse("INVALID_REPLICA_ASSIGNMENT", f"cancelling the reassignment of {where} would need "
                               "an unclean leader election: no original replica is in the ISR")
            self._set_replicas(topic.name, part, original, isr or list(original))
            return Result(value=self._reassignment_value(part, completed=True))
        target = list(cmd.replicas)
        if not target:
            return _refuse("INVALID_REPLICA_ASSIGNMENT", f"the replica list of {where} is empty")
        if len(set(target)) != len(target):
            return _refuse("INVALID_REPLICA_ASSIGNMENT", f"the replica list {target} of {where} names a broker twice")
        missing = [r for r in target if r not in self.brokers]
        if missing:  # registered is enough, as Kafka's: a fenced new replica is waited for (it joins no ISR before)
            return _refuse("INVALID_REPLICA_ASSIGNMENT", f"broker(s) {missing} in {target} are not registered")
        if not cmd.allow_replication_factor_change and len(target) != len(original):
            return _refuse("INVALID_REPLICATION_FACTOR", f"{target} would change {where}'s replication factor "
                           f"{len(original)}, and the request does not allow it")
        removing = [r for r in original if r not in target]
        replicas = target + removing
        isr = [r for r in replicas if r in part.isr]
        if not isr:
            return _refuse("INVALID_REPLICA_ASSIGNMENT", f"no replica of {where} in its ISR {part.isr} would stay")
        self._set_replicas(topic.name, part, replicas, isr)
        part.adding_replicas = tuple(r for r in target if r not in original)
        part.removing_replicas = tuple(removing)
        completed = self._complete_reassignment(topic.name, part)
        return Result(value=self._reassignment_value(part, completed))

    def _set_replicas(self, topic: str, part: PartitionState, replicas: list[int], isr: list[int]) -> None:
        """New replicas and ISR (in replica order), no reassignment in progress; a leader not among them gives
        way to the first live ISR member (leader epoch + 1); the partition epoch moves."""
        part.replicas = list(replicas)
        part.isr = [r for r in replicas if r in isr]
        part.adding_replicas = part.removing_replicas = ()
        if part.leader not in part.replicas or part.leader not in part.isr:
            leader = self._choose_leader(topic, part, set(self.unfenced()))
            if leader != part.leader:
                part.leader = leader
                part.leader_epoch += 1
        part.partition_epoch += 1

    def _complete_reassignment(self, topic: str, part: PartitionState) -> bool:
        """Once every replica being added is in the ISR and some replica of the target is (Kafka's
        maybeCompleteReassignment: a target replica that stays but is down does not hold the move up): the replicas
        are the target, the ISR keeps only them, a leader being removed hands over to the first live ISR member of
        the target (a new leader epoch)."""
        if not part.adding_replicas and not part.removing_replicas:
            return False
        target = [r for r in part.replicas if r not in part.removing_replicas]
        if not set(part.adding_replicas) <= set(part.isr) or not set(target) & set(part.isr):
            return False
        self._set_replicas(topic, part, target, part.isr)
        return True

    def reassignments(self) -> list[dict]:
        """The partitions being reassigned (ListPartitionReassignments): replicas, adding, removing."""
        return [{"topic": t.name, "partition": i, "replicas": list(p.replicas),
                 "adding_replicas": list(p.adding_replicas), "removing_replicas": list(p.removing_replicas)}
                for t in sorted(self.topics.values(), key=lambda t: t.name) for i, p in enumerate(t.partitions)
                if p.adding_replicas or p.removing_replicas]

    @staticmethod
    def _reassignment_value(part: PartitionState, completed: bool) -> dict:
        return {"replicas": list(part.replicas), "isr": list(part.isr), "leader": part.leader,
                "adding_replicas": list(part.adding_replicas), "removing_replicas": list(part.removing_replicas),
                "partition_epoch": part.partition_epoch, "completed": completed}


_THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")  # bytes/s, broker
_THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")  # topic
_REPLICA_LIST = re.compile(r"^\s*(\*|\d+\s*:\s*\d+(\s*,\s*\d+\s*:\s*\d+)*)?\s*$")


def _new_partition(replicas: list[int], live) -> PartitionState:
    """A new partition on ``replicas``: its ISR the live ones, in the replicas' order, the first of them its leader
    (as KRaft's createTopic: a fenced replica of a manual assignment joins the ISR once it has caught up)."""
    live = set(live)
    isr = [r for r in replicas if r in live]
    return PartitionState(replicas=list(replicas), isr=isr, leader=isr[0])


def _check_topic_configs(configs: dict[str, str]) -> Result | None:
    for key in _THROTTLE_RATES:
        if key in configs and not str(configs[key]).strip().isdigit():
            return _refuse("INVALID_CONFIG", f"{key} must be a rate in bytes/s (an integer, 0 or more), not "
                           f"{configs[key]!r}")
    for key in _THROTTLED_REPLICAS:
        if key in configs and not _REPLICA_LIST.match(str(configs[key])):
            return _refuse("INVALID_CONFIG", f"{key} must be * or a list of partition:broker, not {configs[key]!r}")
    for key in ("min.insync.replicas",):
        if key in configs:
            value = configs[key]
            if not str(value).isdigit() or int(value) < 1:
                return _refuse("INVALID_CONFIG", f"{key} must be an integer of at least 1, not {value!r}")
    for key in ("unclean.leader.election.enable",):
        if key in configs and str(configs[key]).lower() not in ("true", "false"):
            return _refuse("INVALID_CONFIG", f"{key} must be true or false, not {configs[key]!r}")
    return None


def place_replicas(
    brokers: list[int], partitions: int, replication_factor: int, start_index: int, shift: int
) -> list[list[int]]:
    """Kafka's rack-unaware replica assignment (``AdminUtils.assignReplicasToBrokersRackUnaware``): partition
    p's first replica is broker ``(start_index + p) mod n``; its followers sit at a shift from it that grows by
    one each time the first replica wraps round the broker list, so leaders and followers spread evenly."""
    n = len(brokers)
    start_index %= n
    shift %= n
    assignment = []
    for p in range(partitions):
        if p > 0 and (p + start_index) % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(replicas)
    return assignment

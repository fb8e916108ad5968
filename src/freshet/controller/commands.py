"""The commands of the cluster metadata log: what the active controller proposes and every controller applies.

Each command carries every input its application needs, the time (``now_ms``) and any random choice (a topic's
id, the placer's start index and shift) included, so that applying it is deterministic: the state machine
reads no clock and draws no random number, and every node that applies the same commands in the same order
holds the same metadata. The proposer (``controller.node``) fills those fields in; tests fill them by hand.

Commands are frozen dataclasses, pickled into the Raft log by pysyncobj; they are also what the controller's
JSON endpoint accepts (``to_dict`` / ``from_dict``), until the brokers speak BrokerRegistration (62),
BrokerHeartbeat (63), AlterPartition (56) and CreateTopics to it over the Kafka protocol.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LeaderChange:
    """Written by a new active controller as its first command (KRaft's LeaderChangeMessage): once applied, every
    command of the terms before it has been applied too, so its writer may act on the metadata it holds."""

    node_id: int
    term: int


@dataclass(frozen=True)
class RegisterBroker:
    """BrokerRegistration: a broker (re)joins. ``incarnation_id`` tells a retry of the same process (accepted,
    same epoch) from a second process with the same node id (DUPLICATE_BROKER_REGISTRATION while the first
    one's session is alive)."""

    broker_id: int
    incarnation_id: str
    host: str
    port: int
    now_ms: int
    rack: str | None = None
    session_timeout_ms: int = 9000  # broker.session.timeout.ms


@dataclass(frozen=True)
class BrokerHeartbeat:
    """BrokerHeartbeat: keeps the broker's session; ``want_fence=False`` unfences a registered broker."""

    broker_id: int
    broker_epoch: int
    now_ms: int
    want_fence: bool = False


@dataclass(frozen=True)
class CloseBrokerSession:
    """The broker's session connection to a controller closed (its process died: kill -9 closes the socket at
    once; or it stopped): it is fenced now, not a session timeout later, and its session is over, so a new
    incarnation with the same node id may register at once. A broker still alive heartbeats again (on a new
    connection) and is unfenced."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class UnregisterBroker:
    broker_id: int


@dataclass(frozen=True)
class FenceStaleBrokers:
    """Fences every unfenced broker whose last heartbeat is older than ``now_ms - session_timeout_ms``: its
    leaderships move to another ISR member, the ISRs drop it, leader epochs bump."""

    now_ms: int
    session_timeout_ms: int


@dataclass(frozen=True)
class CreateTopic:
    """CreateTopics for one topic. ``start_index`` and ``shift`` are the placer's random choices (Kafka's
    rack-unaware assignment: a random first broker and a random shift of the followers), made by the
    proposer; ``topic_id`` likewise. A manual ``assignment`` (one replica list per partition, the preferred
    leader first; CreateTopics' ``assignments``) is taken as it is: ``partitions`` and ``replication_factor``
    are then -1 (or its own counts)."""

    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    start_index: int
    shift: int
    configs: dict[str, str] = field(default_factory=dict)
    assignment: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True)
class CreatePartitions:
    """CreatePartitions for one topic: ``count`` is the new total; the new partitions' replicas are placed as
    CreateTopic places them, with the proposer's random ``start_index`` and ``shift``, or given in
    ``assignment`` (one replica list per new partition, the preferred leader first)."""

    name: str
    count: int
    start_index: int
    shift: int
    assignment: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class AllocateProducerIds:
    """AllocateProducerIds (KIP-730): a block of ``count`` producer ids for one broker, unique in the cluster."""

    broker_id: int
    broker_epoch: int
    count: int


@dataclass(frozen=True)
class AlterPartition:
    """AlterPartition (KIP-497): the leader of a partition changes its ISR. Fenced by the broker epoch, the
    leader epoch (FENCED_LEADER_EPOCH) and the partition epoch (INVALID_UPDATE_VERSION)."""

    broker_id: int
    broker_epoch: int
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True)
class ElectLeaders:
    """ElectLeaders for one partition: ``preferred`` moves leadership to the first replica when it is in the
    ISR and unfenced; ``unclean`` elects an unfenced replica outside the ISR when no ISR member is alive."""

    topic: str
    partition: int
    election_type: str = "preferred"  # or "unclean"


@dataclass(frozen=True)
class AlterConfigs:
    """IncrementalAlterConfigs for one resource: ``resource_type`` is "topic", "broker" (``name`` "" for the
    cluster-wide broker default) or "group" (a group id: share groups' configs, checked by the broker that asks);
    ``set`` values replace, ``delete`` names are removed."""

    resource_type: str
    name: str
    set: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class UpsertScramCredential:
    user: str
    mechanism: str
    iterations: int
    salt: str  # base64, as the broker stores it
    stored_key: str
    server_key: str


@dataclass(frozen=True)
class DeleteScramCredential:
    user: str
    mechanism: str


@dataclass(frozen=True)
class CreateAcl:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True)
class DeleteAcls:
    """Deletes the ACLs matching every field given (None matches anything)."""

    resource_type: str | None = None
    resource_name: str | None = None
    principal: str | None = None
    operation: str | None = None
    pattern_type: str | None = None
    host: str | None = None
    permission: str | None = None


@dataclass(frozen=True)
class AlterClientQuota:
    """AlterClientQuotas for one entity (e.g. ``(("user", "alice"), ("client-id", None))``): ``value`` None
    removes the quota ``key``."""

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float | None


COMMANDS = {
    cls.__name__: cls
    for cls in (
        LeaderChange, RegisterBroker, BrokerHeartbeat, CloseBrokerSession, UnregisterBroker, FenceStaleBrokers,
        CreateTopic, DeleteTopic, CreatePartitions, AlterPartition, ElectLeaders, AlterConfigs, AllocateProducerIds,
        UpsertScramCredential, DeleteScramCredential, CreateAcl, DeleteAcls, AlterClientQuota,
    )
}

Command = (
    LeaderChange | RegisterBroker | BrokerHeartbeat | CloseBrokerSession | UnregisterBroker | FenceStaleBrokers
    | CreateTopic | DeleteTopic | CreatePartitions | AlterPartition | ElectLeaders | AlterConfigs
    | AllocateProducerIds | UpsertScramCredential | DeleteScramCredential | CreateAcl | DeleteAcls | AlterClientQuota
)


def to_dict(command: Command) -> dict:
    return {"command": type(command).__name__, **dataclasses.asdict(command)}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str_or_none(v) -> bool:
    return v is None or isinstance(v, str)


_FIELD_TYPES = {  # a field's annotation -> (check, what it must be)
    "int": (_is_int, "an integer"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str | None": (_is_str_or_none, "a string or null"),
    "float | None": (lambda v: v is None or _is_int(v) or isinstance(v, float), "a number or null"),
    "dict[str, str]": (
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "an object of strings",
    ),
    "tuple[int, ...]": (lambda v: isinstance(v, tuple) and all(map(_is_int, v)), "a list of integers"),
    "tuple[str, ...]": (lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v), "a list of strings"),
    "tuple[tuple[int, ...], ...]": (
        lambda v: isinstance(v, tuple) and all(isinstance(p, tuple) and all(map(_is_int, p)) for p in v),
        "a list of lists of integers",
    ),
    "tuple[tuple[str, str | None], ...]": (
        lambda v: isinstance(v, tuple) and all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and _is_str_or_none(p[1]) for p in v),
        "a list of [type, name or null] pairs",
    ),
}


def from_dict(data: dict) -> Command:
    """A command from its JSON form; a ValueError names what is wrong (an unknown command or field)."""
    data = dict(data)
    name = data.pop("command", None)
    cls = COMMANDS.get(name)
    if cls is None:
        raise ValueError(f"unknown command {name!r}; known: {', '.join(sorted(COMMANDS))}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{name}: unknown field(s) {', '.join(unknown)}")
    for key in ("new_isr", "delete", "replicas"):
        if key in data and isinstance(data[key], list):
            data[key] = tuple(data[key])
    if "assignment" in data and isinstance(data["assignment"], list):
        data["assignment"] = tuple(tuple(p) if isinstance(p, list) else p for p in data["assignment"])
    if "entity" in data and isinstance(data["entity"], list):
        data["entity"] = tuple(tuple(p) if isinstance(p, list) else p for p in data["entity"])
    try:
        command = cls(**data)
    except TypeError as exc:
        raise ValueError(f"{name}: {exc}") from None
    for f in dataclasses.fields(cls):  # a command of the wrong shape must never reach the Raft log
        check, what = _FIELD_TYPES[f.type]
        if not check(getattr(command, f.name)):
            raise ValueError(f"{name}: {f.name} must be {what}, not {getattr(command, f.name)!r}")
    return command


# -- brokers joining and leaving ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlledShutdown:
    """A broker stopping (SIGTERM) asks for its leaderships to move first (KRaft: BrokerHeartbeat with
    WantShutDown; Kafka before KRaft: ControlledShutdown, API 7): it leaves the ISRs and leads nothing, so its
    clients' requests move to the other replicas before it exits."""

    broker_id: int
    broker_epoch: int


COMMANDS.update({cls.__name__: cls for cls in (ControlledShutdown,)})


# -- partition reassignment (KIP-455) ----------------------------------------------------------------------


@dataclass(frozen=True)
class AlterPartitionReassignment:
    """AlterPartitionReassignments (API 45) for one partition: move it to ``replicas`` (the new replicas are added
    and follow, the old ones are dropped once every new replica is in the ISR: the controller completes it on
    the AlterPartition that brings the last one in), or ``cancel`` the one in progress (back to the original
    replicas). ``allow_replication_factor_change`` False (v1) refuses a target of another size."""

    topic: str
    partition: int
    replicas: tuple[int, ...] = ()
    cancel: bool = False
    allow_replication_factor_change: bool = True


COMMANDS.update({cls.__name__: cls for cls in (AlterPartitionReassignment,)})

"""The admin requests of a broker in a cluster: topics are the controllers' metadata, so CreateTopics,
DeleteTopics, CreatePartitions and topic configs go to the controller, which answers Kafka's error codes
(INVALID_REPLICATION_FACTOR above the unfenced brokers, TOPIC_ALREADY_EXISTS, ...) and changes nothing on a
refusal; the answer waits until this broker's view holds the change, so the client's next Metadata sees it.
What the log itself checks (names, partition counts, config names and values) is checked here first, as the
one-node broker checks it. Metadata / DescribeCluster / DescribeTopicPartitions read the ``ClusterView``.
"""

from __future__ import annotations

import base64
import uuid

from kio.schema.errors import ErrorCode

from freshet.controller.placement import AssignmentError, check_added, check_assignment

from ..security.acls import AclBinding
from ..security.credentials import ScramCredential
from ..topics.registry import MAX_PARTITIONS, TopicError, check_topic_name
from ..topics.topic_config import CONFIG_DEFS, InvalidConfigError, validate_configs
from ..wire import protocol
from .view import ClusterView, TopicInfo

# configs the controller keeps for the cluster (leader election, acks=all) beside the log's own
CLUSTER_TOPIC_CONFIGS = {"unclean.leader.election.enable",
                         # which replicas the replication throttle holds back (reassignment: "*" or partition:broker)
                         "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
CLUSTER_BROKER_CONFIGS = {"min.insync.replicas", "unclean.leader.election.enable",
                          "leader.replication.throttled.rate", "follower.replication.throttled.rate"}  # bytes/s
WAIT_FOR_VIEW_S = 30.0


def _error(answer: dict) -> TopicError:
    return TopicError(answer.get("error_code") or ErrorCode.unknown_server_error,
                      answer.get("message") or answer.get("error", ""))


def check_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """The log's configs checked and normalized as the one-node broker does; the cluster's own passed on."""
    log = {k: v for k, v in configs.items() if k not in CLUSTER_TOPIC_CONFIGS}
    try:
        checked = validate_configs(log)
    except InvalidConfigError as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    for key in CLUSTER_TOPIC_CONFIGS & set(configs):
        if configs[key] is not None:
            checked[key] = str(configs[key])
    return checked


# -- describing --------------------------------------------------------------------------------------------
def topic_metadata(view: ClusterView, topic: TopicInfo) -> dict:
    """A topic as Metadata and DescribeTopicPartitions answer it: each partition's leader (-1 and
    LEADER_NOT_AVAILABLE when offline), leader epoch, replicas, ISR and offline replicas."""
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name.startswith("__"),  # __consumer_offsets
        "partitions": [
            {
                "error_code": ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": p.index,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": view.offline_replicas(p),
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": -(2**31),
    }


def broker_nodes(view: ClusterView, id_field: str, include_fenced: bool = False) -> list[dict]:
    """Every unfenced broker, at the address it registered; with ``include_fenced`` (DescribeCluster v2,
    KIP-1073) the fenced ones too, each with ``is_fenced``."""
    if include_fenced:
        return [{id_field: b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "is_fenced": b.fenced}
                for _, b in sorted(view.brokers.items())]
    return [{id_field: b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in view.live_brokers()]


def controller_for_clients(view: ClusterView, node_id: int) -> int:
    """The ``controller_id`` of Metadata and DescribeCluster: a live broker, as KRaft's brokers answer (any
    broker takes the controller's requests and forwards them). The active controller's node while its broker is
    up, else this broker: a client sends CreateTopics, ElectLeaders, ... to that id and, told of a broker not in
    the list, waits for it until its request times out."""
    live = [b.node_id for b in view.live_brokers()]
    if view.controller_id in live:
        return view.controller_id
    return node_id if node_id in live or not live else live[0]


# -- changing ----------------------------------------------------------------------------------------------
async def create_topic(broker, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                       validate_only: bool, assignment: list[list[int]] | None = None) -> TopicInfo | None:
    """One topic through the controller (validate_only: checked against the view, nothing asked); a manual
    ``assignment`` (one replica list per partition) instead of partitions and replication factor."""
    view = broker.cluster.view
    check_topic_name(name)
    if assignment:
        partitions, replication_factor = len(assignment), len(assignment[0])
    if partitions == -1:
        partitions = broker.default_partitions
    if replication_factor == -1:
        replication_factor = broker.config.default_replication_factor
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise TopicError(ErrorCode.invalid_partitions, f"partitions must be 1..{MAX_PARTITIONS}, got {partitions}")
    checked = check_configs(configs)
    if validate_only:
        if name in view.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        live = len(view.live_brokers())
        if assignment:
            _check_assignment(view, assignment)
        elif not 1 <= replication_factor <= live:
            raise TopicError(ErrorCode.invalid_replication_factor,
                             f"replication factor {replication_factor} is not between 1 and the {live} live broker(s)")
        return None
    command = {"command": "CreateTopic", "name": name, "partitions": partitions,
               "replication_factor": replication_factor, "configs": checked}
    if assignment:
        command.update(partitions=-1, replication_factor=-1, assignment=assignment)
    answer = await broker.cluster.command(command)
    if answer["error"] != "NONE":
        raise _error(answer)
    topic_id = uuid.UUID(answer["value"]["topic_id"])
    await broker.cluster.wait_for(lambda v: getattr(v.topics.get(name), "topic_id", None) == topic_id,
                                  WAIT_FOR_VIEW_S)
    return broker.cluster.view.topics.get(name)


async def delete_topic(broker, name: str) -> uuid.UUID:
    info = broker.cluster.view.topics.get(name)
    if info is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    answer = await broker.cluster.command({"command": "DeleteTopic", "name": name})
    if answer["error"] != "NONE":
        raise _error(answer)
    await broker.cluster.wait_for(lambda v: getattr(v.topics.get(name), "topic_id", None) != info.topic_id,
                                  WAIT_FOR_VIEW_S)
    return info.topic_id


def check_replica_assignment(assignment: list[list[int]], registered, live, factor: int | None = None,
                             first: int = 0, added: tuple[str, int] | None = None, note: str = "") -> None:
    """A manual replica assignment checked as the controller checks it against the metadata: TopicError
    INVALID_REPLICA_ASSIGNMENT (``note`` added to its message). ``added``: (topic, partitions added), when the
    assignment is CreatePartitions'."""
    try:
        if added is not None:
            check_added(*added, len(assignment))
        check_assignment(assignment, registered, live, factor, first)
    except AssignmentError as exc:
        raise TopicError(ErrorCode.invalid_replica_assignment, f"{exc}{note}") from None


def _check_assignment(view: ClusterView, assignment: list[list[int]], factor: int | None = None,
                      first: int = 0, added: tuple[str, int] | None = None) -> None:
    """What validate_only answers: the assignment checked against this broker's view."""
    check_replica_assignment(assignment, view.brokers, [b.node_id for b in view.live_brokers()], factor, first,
                             added)


async def create_partitions(broker, name: str, count: int, validate_only: bool,
                            assignment: list[list[int]] | None = None) -> None:
    """New partitions up to ``count``: placed by the controller, or on the replicas of ``assignment`` (one list per
    new partition)."""
    info = broker.cluster.view.topics.get(name)
    if info is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    if count <= len(info.partitions):
        raise TopicError(ErrorCode.invalid_partitions,
                         f"topic {name!r} has {len(info.partitions)} partitions; the new count must be larger, "
                         f"got {count}")
    if count > MAX_PARTITIONS:
        raise TopicError(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS} partitions")
    if validate_only:
        if assignment:
            current, first = len(info.partitions), info.partitions[0]
            _check_assignment(broker.cluster.view, assignment, len(first.replicas) - len(first.removing_replicas),
                              current, (name, count - current))
        return
    command = {"command": "CreatePartitions", "name": name, "count": count}
    if assignment:
        command["assignment"] = assignment
    answer = await broker.cluster.command(command)
    if answer["error"] != "NONE":
        raise _error(answer)
    await broker.cluster.wait_for(lambda v: name in v.topics and len(v.topics[name].partitions) >= count,
                                  WAIT_FOR_VIEW_S)


async def alter_topic_configs(broker, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    """A topic's whole set of overrides (what IncrementalAlterConfigs / AlterConfigs made of the current one)."""
    info = broker.cluster.view.topics.get(name)
    if info is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    checked = check_configs(overrides)
    if validate_only:
        return
    removed = sorted(set(info.configs) - set(checked))
    answer = await broker.cluster.command({"command": "AlterConfigs", "resource_type": "topic", "name": name,
                                           "set": checked, "delete": removed})
    if answer["error"] != "NONE":
        raise _error(answer)
    await broker.cluster.wait_for(lambda v: name in v.topics and v.topics[name].configs == checked, WAIT_FOR_VIEW_S)


async def alter_cluster_broker_configs(broker, level: str, changes: dict[str, str | None],
                                       validate_only: bool) -> None:
    """min.insync.replicas / unclean.leader.election.enable for every broker ("") or one: cluster metadata."""
    if level not in ("",) and not (level.isdigit() and int(level) in broker.cluster.view.brokers):
        raise TopicError(ErrorCode.invalid_request, f"broker {level!r} is not registered")
    if validate_only:
        return
    await _alter_configs(broker, "broker", level, changes)


async def alter_group_configs(broker, group_id: str, changes: dict[str, str | None]) -> None:
    """A group's configs (share groups' share.*, checked by the caller; None: removed) in the cluster metadata, as
    Kafka's controller keeps GROUP configs: the same on every broker, whichever was asked; returns once this
    broker's view has them."""
    await _alter_configs(broker, "group", group_id, changes)
    await broker.cluster.wait_for(lambda v: all(v.group_configs.get(group_id, {}).get(k) == value
                                                for k, value in changes.items()), WAIT_FOR_VIEW_S)


async def _alter_configs(broker, resource_type: str, name: str, changes: dict[str, str | None]) -> None:
    answer = await broker.cluster.command({
        "command": "AlterConfigs", "resource_type": resource_type, "name": name,
        "set": {k: v for k, v in changes.items() if v is not None},
        "delete": [k for k, v in changes.items() if v is None]})
    if answer["error"] != "NONE":
        raise _error(answer)


_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")


def acl_bindings(view: ClusterView) -> set[AclBinding]:
    """The cluster's ACLs as the authorizer holds them (the controller keeps each field as a string)."""
    return {AclBinding(int(a["resource_type"]), a["resource_name"], int(a["pattern_type"]), a["principal"],
                       a["host"], int(a["operation"]), int(a["permission"])) for a in view.acls}


def _acl_command(name: str, binding: AclBinding) -> dict:
    return {"command": name, **{f: str(getattr(binding, f)) for f in _ACL_FIELDS}}


async def create_acls(broker, bindings: list[AclBinding]) -> None:
    """CreateAcls in a cluster: each binding to the controller; answered once this broker's authorizer has them."""
    for binding in bindings:
        answer = await broker.cluster.command(_acl_command("CreateAcl", binding))
        if answer["error"] != "NONE":
            raise _error(answer)
    await broker.cluster.wait_for(lambda v: set(bindings) <= acl_bindings(v), WAIT_FOR_VIEW_S)


async def delete_acls(broker, matched: list[list[AclBinding]]) -> None:
    """DeleteAcls in a cluster: the bindings the filters matched (in the cluster's ACLs), each removed exactly."""
    gone = {b for group in matched for b in group}
    for binding in sorted(gone):
        answer = await broker.cluster.command(_acl_command("DeleteAcls", binding))
        if answer["error"] != "NONE":
            raise _error(answer)
    await broker.cluster.wait_for(lambda v: not gone & acl_bindings(v), WAIT_FOR_VIEW_S)


def scram_credentials(view: ClusterView) -> dict[str, dict[str, ScramCredential]]:
    """The cluster's SCRAM credentials as the credential store holds them."""
    return {user: {mechanism: ScramCredential(mechanism, base64.b64decode(c["salt"]), int(c["iterations"]),
                                              base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
                   for mechanism, c in mechanisms.items()}
            for user, mechanisms in view.scram.items()}


async def alter_scram_credentials(broker, upserts: list[tuple[str, ScramCredential]],
                                  deletes: list[tuple[str, str]]) -> dict[str, TopicError]:
    """AlterUserScramCredentials in a cluster: each change to the controller; the users it refused, by name."""
    refused: dict[str, TopicError] = {}
    for user, mechanism in deletes:
        answer = await broker.cluster.command({"command": "DeleteScramCredential", "user": user,
                                               "mechanism": mechanism})
        if answer["error"] != "NONE":
            refused[user] = _error(answer)
    for user, c in upserts:
        answer = await broker.cluster.command({
            "command": "UpsertScramCredential", "user": user, "mechanism": c.mechanism, "iterations": c.iterations,
            **{k: v for k, v in c.to_json().items() if k != "iterations"}})
        if answer["error"] != "NONE":
            refused[user] = _error(answer)
    await broker.cluster.wait_for(lambda v: all(
        (scram_credentials(v).get(user, {}).get(c.mechanism) == c) for user, c in upserts if user not in refused)
        and all(m not in v.scram.get(user, {}) for user, m in deletes if user not in refused), WAIT_FOR_VIEW_S)
    return refused


async def alter_client_quotas(broker, changes: dict[tuple, dict[str, float | None]]) -> dict[tuple, TopicError]:
    """AlterClientQuotas in a cluster: each entity's changes to the controller; the entities it refused."""
    refused: dict[tuple, TopicError] = {}
    for entity, ops in changes.items():
        for key, value in ops.items():
            answer = await broker.cluster.command({"command": "AlterClientQuota", "entity": [list(p) for p in entity],
                                                   "key": key, "value": value})
            if answer["error"] != "NONE":
                refused[entity] = _error(answer)
                break

    def applied(view: ClusterView) -> bool:
        return all(view.quotas.get(entity, {}).get(key) == value for entity, ops in changes.items()
                   if entity not in refused for key, value in ops.items())

    await broker.cluster.wait_for(applied, WAIT_FOR_VIEW_S)
    return refused


def log_configs(info: TopicInfo) -> dict[str, str]:
    """The topic's configs that the log knows (DescribeConfigs answers these)."""
    return {k: v for k, v in info.configs.items() if k in CONFIG_DEFS}


ZERO_UUID = protocol.ZERO_UUID

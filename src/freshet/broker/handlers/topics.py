"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs: topics, groups and
their settings."""

from __future__ import annotations

import os

from kio.schema.errors import ErrorCode

from freshet.controller.placement import AssignmentError, ordered_assignment
from freshet.log import LogError

from ..wire import protocol
from ..security.acls import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    TOPIC,
)
from ..cluster import admin as cluster_admin
from ..context import BrokerServices, Request, RequestContext, Response
from ..errors import error_code_for
from ..groups.consumer import CONSUMER_GROUP_CONFIGS, ConsumerGroupError
from ..groups.share import GROUP_CONFIGS, ShareGroupError
from ..topics import dynamic_config
from ..topics.registry import TopicError
from ..topics.topic_config import (
    CONFIG_DEFS,
    ConfigSource,
    ConfigType,
    InvalidConfigError,
    config_entry,
    describe as topic_configs,
)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
CONFIG_SET, CONFIG_DELETE, CONFIG_APPEND, CONFIG_SUBTRACT = 0, 1, 2, 3


# what CreateTopics answers of each config (DescribeConfigs adds synonyms, type and documentation)
_CREATED_CONFIG_FIELDS = ("name", "value", "read_only", "config_source", "is_sensitive")


def _created_entry(t) -> dict:
    return {"name": t.name, "topic_id": protocol.ZERO_UUID, "error_code": ErrorCode.none, "error_message": None,
            "num_partitions": -1, "replication_factor": -1, "configs": []}


def _may_create(ctx: RequestContext, t, names: list[str]) -> None:
    """Refuses a topic the principal may not create, or one named twice in the request."""
    if not (ctx.allowed(CREATE, CLUSTER, CLUSTER_NAME) or ctx.allowed(CREATE, TOPIC, t.name)):
        raise TopicError(ErrorCode.topic_authorization_failed, f"not authorized to create topic {t.name!r}")
    if names.count(t.name) > 1:
        raise TopicError(ErrorCode.invalid_request, f"topic {t.name!r} appears more than once in the request")


def _requested_assignment(t) -> list[list[int]] | None:
    """A CreateTopics topic's manual replica assignment, one replica list per partition (None when it has none):
    INVALID_REQUEST beside partitions or a replication factor (Kafka: both cannot be used at the same time),
    INVALID_REPLICA_ASSIGNMENT for partition indexes that are not 0..n-1 once each."""
    if not t.assignments:
        return None
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise TopicError(ErrorCode.invalid_request, "both partitions or replication factor and replica assignments "
                         "were given: give either")
    try:
        return ordered_assignment((a.partition_index, list(a.broker_ids)) for a in t.assignments)
    except AssignmentError as exc:
        raise TopicError(ErrorCode.invalid_replica_assignment, str(exc)) from None


def _check_alone(ctx: RequestContext, assignment: list[list[int]], factor: int | None = None,
                 first: int = 0, added: tuple[str, int] | None = None) -> None:
    """A one-node broker's check of a manual replica assignment: every partition on this broker alone
    (``added``: CreatePartitions' topic and partitions added, one assignment each)."""
    me = [ctx.broker.config.node_id]
    cluster_admin.check_replica_assignment(assignment, me, me, factor, first, added,
                                           f" (this broker, {me[0]}, is the only one)")


def create_topics(ctx: RequestContext, request: Request) -> Response:
    if ctx.broker.cluster is not None:
        return _create_topics_in_cluster(ctx, request)
    registry = ctx.broker.registry
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        result = _created_entry(t)
        try:
            _may_create(ctx, t, names)
            partitions = t.num_partitions
            if partitions == -1:
                partitions = ctx.broker.default_partitions
            if assignment := _requested_assignment(t):
                _check_alone(ctx, assignment)
                partitions = len(assignment)
            configs = {c.name: c.value for c in t.configs}
            if request.validate_only:
                overrides = registry.validate_create(t.name, partitions, t.replication_factor, configs)
                result["topic_id"] = protocol.ZERO_UUID
            else:
                topic = registry.create(t.name, partitions, t.replication_factor, configs)
                overrides = topic.configs
                result["topic_id"] = topic.topic_id
            result.update(num_partitions=partitions, replication_factor=1,
                          configs=[{k: c[k] for k in _CREATED_CONFIG_FIELDS}
                                   for c in topic_configs(overrides, ctx.broker.dynamic.inherited())])
        except TopicError as exc:
            result.update(error_code=exc.error_code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "topics": results}


async def _create_topics_in_cluster(ctx: RequestContext, request: Request) -> dict:
    """CreateTopics through the controller: the same checks and answer as the one-node broker's, the replication
    factor up to the live brokers (default.replication.factor when none is given)."""
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        result = _created_entry(t)
        try:
            _may_create(ctx, t, names)
            assignment = _requested_assignment(t)
            configs = {c.name: c.value for c in t.configs}
            info = await cluster_admin.create_topic(ctx.broker, t.name, t.num_partitions, t.replication_factor,
                                                    configs, request.validate_only, assignment)
            checked = cluster_admin.check_configs(configs)
            partitions = t.num_partitions if t.num_partitions != -1 else ctx.broker.default_partitions
            factor = (t.replication_factor if t.replication_factor != -1
                      else ctx.broker.config.default_replication_factor)
            if assignment:
                partitions, factor = len(assignment), len(assignment[0])
            result.update(topic_id=info.topic_id if info else protocol.ZERO_UUID, num_partitions=partitions,
                          replication_factor=factor,
                          configs=[{k: c[k] for k in _CREATED_CONFIG_FIELDS} for c in topic_configs(
                              {k: v for k, v in checked.items() if k in CONFIG_DEFS},
                              ctx.broker.dynamic.inherited())])
        except TopicError as exc:
            result.update(error_code=exc.error_code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "topics": results}


def delete_topics(ctx: RequestContext, request: Request) -> Response:
    """DeleteTopics by name or id; in a cluster, through the controller (every broker deletes its replicas)."""
    broker = ctx.broker
    registry = broker.registry
    view = broker.cluster.view if broker.cluster is not None else None
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    responses, in_cluster = [], []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            topic = view.by_id(topic_id) if view is not None else registry.by_id.get(topic_id)
            name = topic.name if topic else None
        response = {"name": name, "topic_id": topic_id or protocol.ZERO_UUID,
                    "error_code": ErrorCode.none, "error_message": None}
        responses.append(response)
        try:
            if name is None:
                raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic with id {topic_id}")
            if not ctx.allowed(DELETE, TOPIC, name):
                raise TopicError(ErrorCode.topic_authorization_failed, f"not authorized to delete topic {name!r}")
            topic = registry.get(name)
            if topic is not None:
                response["topic_id"] = topic.topic_id
                if topic.internal:
                    raise TopicError(ErrorCode.invalid_request, f"{name} is an internal topic")
            if view is not None:
                in_cluster.append((response, cluster_admin.delete_topic(broker, name), "topic_id"))
            else:
                registry.delete(name)
        except TopicError as exc:
            response.update(error_code=exc.error_code, error_message=str(exc))
    body = {"throttle_time": 0, "responses": responses}
    return _answer_in_cluster(broker, body, in_cluster, []) if in_cluster else body


def create_partitions(ctx: RequestContext, request: Request) -> Response:
    if ctx.broker.cluster is not None:
        return _create_partitions_in_cluster(ctx, request)
    registry = ctx.broker.registry
    results = []
    for t in request.topics:
        result = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if not ctx.allowed(ALTER, TOPIC, t.name):
                raise TopicError(ErrorCode.topic_authorization_failed, f"not authorized to alter topic {t.name!r}")
            if t.assignments:
                topic = registry.get(t.name)
                current = len(topic.partitions) if topic is not None else 0
                if topic is not None and t.count > current:
                    _check_alone(ctx, [list(a.broker_ids) for a in t.assignments], 1, current,
                                 (t.name, t.count - current))
            registry.add_partitions(t.name, t.count, validate_only=request.validate_only)
        except TopicError as exc:
            result.update(error_code=exc.error_code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "results": results}


async def _create_partitions_in_cluster(ctx: RequestContext, request: Request) -> dict:
    results = []
    for t in request.topics:
        result = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if not ctx.allowed(ALTER, TOPIC, t.name):
                raise TopicError(ErrorCode.topic_authorization_failed, f"not authorized to alter topic {t.name!r}")
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            await cluster_admin.create_partitions(ctx.broker, t.name, t.count, request.validate_only, assignment)
        except TopicError as exc:
            result.update(error_code=exc.error_code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _broker_level(broker: BrokerServices, name: str) -> str:
    """The level a BROKER resource names: "" (the cluster default) or this broker's id."""
    if name not in ("", str(broker.config.node_id)):
        raise TopicError(ErrorCode.invalid_request,
                         f"unexpected broker id {name!r}: expected {broker.config.node_id} or the empty string")
    return name


def _alter_broker(broker: BrokerServices, name: str, changes: list[tuple[str, int, str | None]],
                  validate_only: bool, replace: bool = False) -> None:
    """Dynamic broker configs changed (SET, DELETE; APPEND / SUBTRACT for log.cleanup.policy), all or nothing;
    ``replace`` (AlterConfigs): the given configs become the level's whole set."""
    level = _broker_level(broker, name)
    values = {} if replace else dict(broker.dynamic.levels[level])
    seen = set()
    try:
        for key, operation, value in changes:
            if key in seen:
                raise InvalidConfigError(f"{key} is changed twice in one request")
            seen.add(key)
            if operation == CONFIG_DELETE:
                values.pop(key, None)
                continue
            if operation in (CONFIG_APPEND, CONFIG_SUBTRACT):
                if not dynamic_config.is_list(key):
                    raise InvalidConfigError(f"{key} is not a list: APPEND and SUBTRACT do not apply")
                value = _list_change(values.get(key, dynamic_config.default(key)), operation, value)
            elif operation != CONFIG_SET:
                raise InvalidConfigError(f"unknown config operation {operation}")
            if value is None:
                raise InvalidConfigError(f"{key}: SET needs a value")
            values[key] = dynamic_config.check(key, value)
    except InvalidConfigError as exc:
        code = ErrorCode.invalid_request if "cannot be updated dynamically" in str(exc) else ErrorCode.invalid_config
        raise TopicError(code, str(exc)) from None
    if not validate_only:
        broker.alter_dynamic_configs(level, values)


def describe_configs(ctx: RequestContext, request: Request) -> dict:
    broker = ctx.broker
    synonyms = bool(getattr(request, "include_synonyms", False))  # v1+
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": []}
        refused = _config_refusal(ctx, resource.resource_type, resource.resource_name, DESCRIBE_CONFIGS)
        if refused is not None:
            result["error_code"] = refused
        elif resource.resource_type == RESOURCE_TOPIC:
            if broker.cluster is not None:
                info = broker.cluster.view.topics.get(resource.resource_name)
                overrides = cluster_admin.log_configs(info) if info is not None else None
            else:
                topic = broker.registry.get(resource.resource_name)
                overrides = topic.configs if topic is not None else None
            if overrides is None:
                result.update(error_code=ErrorCode.unknown_topic_or_partition,
                              error_message=f"topic {resource.resource_name!r} does not exist")
            else:
                result["configs"] = topic_configs(overrides, broker.dynamic.inherited(), keys, synonyms)
        elif resource.resource_type == RESOURCE_BROKER and resource.resource_name in ("", str(broker.config.node_id)):
            result["configs"] = broker.dynamic.describe(broker.config, resource.resource_name, keys, synonyms)
        elif resource.resource_type == RESOURCE_GROUP:
            result["configs"] = _group_configs(broker, resource.resource_name, keys)
        else:
            result.update(error_code=ErrorCode.invalid_request,
                          error_message=f"resource type {resource.resource_type} {resource.resource_name!r} "
                          "is not described by this broker")
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _group_configs(broker: BrokerServices, group_id: str, keys: set[str] | None) -> list[dict]:
    """A group's configs (share groups' share.*, Kafka 4.0's consumer.* of KIP-848 groups): the group's own
    value, else the broker's default."""
    share, consumer = broker.share_groups, broker.consumer_groups
    own = {**share.configs_of(group_id), **consumer.configs.get(group_id, {})}
    known = [(name, str(getattr(share.settings, attr)), ConfigType.STRING)
             for name, (attr, _, _) in sorted(GROUP_CONFIGS.items())]
    known += [(name, str(getattr(consumer.settings, attr)), ConfigType.INT)
              for name, attr in sorted(CONSUMER_GROUP_CONFIGS.items())]
    out = []
    for name, default, kind in known:
        if keys is not None and name not in keys:
            continue
        value = own.get(name)
        source = ConfigSource.GROUP if value is not None else ConfigSource.DEFAULT
        out.append(config_entry(name, [(name, value if value is not None else default, source)], kind, None))
    return out


def incremental_alter_configs(ctx: RequestContext, request: Request) -> Response:
    """Topic configs (applied at once: see ``TopicRegistry.alter_configs``), the broker's dynamic configs (see
    ``dynamic_config``) and group configs (share groups' ``share.*``), each resource validated whole before
    anything of it is applied."""
    broker = ctx.broker
    responses = []
    waits = []
    in_cluster = []
    for resource in request.resources:
        entry = _alteration_entry(ctx, resource)
        responses.append(entry)
        if entry["error_code"] != ErrorCode.none:
            continue
        if broker.cluster is not None and (resource.resource_type == RESOURCE_TOPIC or (
                resource.resource_type == RESOURCE_BROKER and resource.configs
                and {c.name for c in resource.configs} <= cluster_admin.CLUSTER_BROKER_CONFIGS)):
            in_cluster.append((entry, _alter_in_cluster(broker, resource, request.validate_only)))
            continue  # the cluster's metadata: through the controller
        alter = {RESOURCE_TOPIC: _alter_topic, RESOURCE_BROKER: _alter_broker}.get(resource.resource_type)
        if alter is not None:
            try:
                alter(broker, resource.resource_name, [(c.name, c.config_operation, c.value)
                                                       for c in resource.configs], request.validate_only)
            except TopicError as exc:
                entry.update(error_code=exc.error_code, error_message=str(exc))
            continue
        if resource.resource_type != RESOURCE_GROUP:
            entry.update(error_code=ErrorCode.invalid_request,
                         error_message=f"resource type {resource.resource_type} is not alterable at run time here")
            continue
        if not resource.resource_name:
            entry.update(error_code=ErrorCode.invalid_group_id, error_message="the group id must not be empty")
            continue
        changes: dict[str, str | None] = {}
        try:
            for c in resource.configs:
                if c.config_operation not in (CONFIG_SET, CONFIG_DELETE):
                    raise ShareGroupError(ErrorCode.invalid_config, f"{c.name}: only SET and DELETE apply to it")
                value = c.value if c.config_operation == CONFIG_SET else None
                if c.config_operation == CONFIG_SET and value is None:
                    raise ShareGroupError(ErrorCode.invalid_config, f"{c.name}: SET needs a value")
                if c.name not in CONSUMER_GROUP_CONFIGS:
                    broker.share_groups.validate_config(c.name, value)
                changes[c.name] = value
            broker.consumer_groups.validate_configs(
                resource.resource_name, {k: v for k, v in changes.items() if k in CONSUMER_GROUP_CONFIGS})
        except (ShareGroupError, ConsumerGroupError) as exc:
            entry.update(error_code=exc.error_code, error_message=str(exc))
            continue
        if request.validate_only or not changes:
            continue
        if broker.cluster is not None:  # the cluster's metadata, as Kafka's GROUP configs: the same on every broker
            in_cluster.append((entry, cluster_admin.alter_group_configs(broker, resource.resource_name, changes)))
        else:
            if consumer := {k: v for k, v in changes.items() if k in CONSUMER_GROUP_CONFIGS}:
                broker.consumer_groups.alter_configs(resource.resource_name, consumer)
            if share := {k: v for k, v in changes.items() if k not in CONSUMER_GROUP_CONFIGS}:
                waits.append(broker.share_groups.alter_configs(resource.resource_name, share))
    body = {"throttle_time": 0, "responses": responses}
    if in_cluster:
        return _answer_in_cluster(broker, body, in_cluster, waits)
    if not waits:
        return body
    return broker.group_commit.answer_when_durable(body, (broker.share_groups.state, max(waits)))


async def _answer_in_cluster(broker: BrokerServices, body: dict, in_cluster: list, waits: list) -> dict:
    """``body`` once each change sent to the controller is answered: ``(entry, change[, key])``, the entry of
    ``body`` that a refusal fills in (and ``key`` of it the change's value)."""
    for entry, change, *key in in_cluster:
        try:
            value = await change
            if key:
                entry[key[0]] = value
        except TopicError as exc:
            entry.update(error_code=exc.error_code, error_message=str(exc))
    if waits:
        await broker.group_commit.answer_when_durable(body, (broker.share_groups.state, max(waits)))
    return body


async def _alter_in_cluster(broker: BrokerServices, resource, validate_only: bool) -> None:
    """A topic's configs, or min.insync.replicas / unclean.leader.election.enable of the brokers, changed in the
    cluster's metadata (IncrementalAlterConfigs: SET, DELETE; APPEND / SUBTRACT for list configs)."""
    changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
    if resource.resource_type == RESOURCE_BROKER:
        values = {}
        for key, operation, value in changes:
            if operation not in (CONFIG_SET, CONFIG_DELETE) or (operation == CONFIG_SET and value is None):
                raise TopicError(ErrorCode.invalid_config, f"{key}: only SET with a value and DELETE apply")
            values[key] = value if operation == CONFIG_SET else None
        await cluster_admin.alter_cluster_broker_configs(broker, resource.resource_name, values, validate_only)
        return
    info = broker.cluster.view.topics.get(resource.resource_name)
    if info is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist")
    overrides = _changed_overrides(dict(info.configs), changes, cluster_admin.CLUSTER_TOPIC_CONFIGS)
    await cluster_admin.alter_topic_configs(broker, resource.resource_name, overrides, validate_only)


def _list_change(current: str, operation: int, value: str | None) -> str:
    """A list config (cleanup.policy) after APPEND or SUBTRACT of ``value``'s comma-separated items."""
    items = [v for v in current.split(",") if v]
    for v in (value or "").split(","):
        if operation == CONFIG_APPEND and v and v not in items:
            items.append(v)
        elif operation == CONFIG_SUBTRACT and v in items:
            items.remove(v)
    return ",".join(sorted(items))


def _alter_topic(broker: BrokerServices, name: str, changes: list[tuple[str, int, str | None]],
                 validate_only: bool) -> None:
    """Incremental changes (SET, DELETE, APPEND, SUBTRACT) applied to a topic's overrides, all or nothing."""
    topic = broker.registry.get(name)
    if topic is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    overrides = _changed_overrides(dict(topic.configs), changes)
    broker.registry.alter_configs(name, overrides, validate_only)
    if not validate_only:
        broker.clean_soon(name)


def _changed_overrides(overrides: dict[str, str], changes: list[tuple[str, int, str | None]],
                       also: set[str] = frozenset()) -> dict[str, str]:
    """A topic's overrides after SET, DELETE, APPEND, SUBTRACT (``also``: plain configs beside the log's)."""
    seen = set()
    for key, operation, value in changes:
        if key in seen:
            raise TopicError(ErrorCode.invalid_config, f"{key} is changed twice in one request")
        seen.add(key)
        if key in also and operation in (CONFIG_SET, CONFIG_DELETE):
            if operation == CONFIG_DELETE:
                overrides.pop(key, None)
            elif value is None:
                raise TopicError(ErrorCode.invalid_config, f"{key}: SET needs a value")
            else:
                overrides[key] = value
            continue
        if key not in CONFIG_DEFS:
            raise TopicError(ErrorCode.invalid_config, f"unknown topic config {key!r}")
        definition = CONFIG_DEFS[key]
        if operation == CONFIG_SET:
            if value is None:
                raise TopicError(ErrorCode.invalid_config, f"{key}: SET needs a value")
            overrides[key] = value
        elif operation == CONFIG_DELETE:
            overrides.pop(key, None)
        elif operation in (CONFIG_APPEND, CONFIG_SUBTRACT):
            if not definition.is_list:
                raise TopicError(ErrorCode.invalid_config, f"{key} is not a list: APPEND and SUBTRACT do not apply")
            overrides[key] = _list_change(overrides.get(key, definition.default), operation, value)
            if not overrides[key]:
                raise TopicError(ErrorCode.invalid_config, f"{key} cannot be empty")
        else:
            raise TopicError(ErrorCode.invalid_config, f"unknown config operation {operation}")
    return overrides


def alter_configs(ctx: RequestContext, request: Request) -> Response:
    """The legacy AlterConfigs: a topic's overrides, or a broker level's dynamic configs, replaced by the ones
    given (kcat-style tools use it)."""
    broker = ctx.broker
    responses = []
    in_cluster = []
    for resource in request.resources:
        entry = _alteration_entry(ctx, resource)
        responses.append(entry)
        if entry["error_code"] != ErrorCode.none:
            continue
        if resource.resource_type == RESOURCE_BROKER:
            try:
                _alter_broker(broker, resource.resource_name, [(c.name, CONFIG_SET, c.value) for c in resource.configs
                                                              if c.value is not None], request.validate_only,
                              replace=True)
            except TopicError as exc:
                entry.update(error_code=exc.error_code, error_message=str(exc))
            continue
        if resource.resource_type != RESOURCE_TOPIC:
            entry.update(error_code=ErrorCode.invalid_request,
                         error_message=f"resource type {resource.resource_type} is not alterable at run time here")
            continue
        if broker.cluster is not None:
            in_cluster.append((entry, cluster_admin.alter_topic_configs(
                broker, resource.resource_name, {c.name: c.value for c in resource.configs if c.value is not None},
                request.validate_only)))
            continue
        try:
            broker.registry.alter_configs(resource.resource_name, {c.name: c.value for c in resource.configs
                                                                   if c.value is not None}, request.validate_only)
            if not request.validate_only:
                broker.clean_soon(resource.resource_name)
        except TopicError as exc:
            entry.update(error_code=exc.error_code, error_message=str(exc))
    body = {"throttle_time": 0, "responses": responses}
    return _answer_in_cluster(broker, body, in_cluster, []) if in_cluster else body


def _alteration_entry(ctx: RequestContext, resource) -> dict:
    """A resource's answer to IncrementalAlterConfigs / AlterConfigs: refused up front if the principal may not
    alter its configs."""
    refused = _config_refusal(ctx, resource.resource_type, resource.resource_name, ALTER_CONFIGS)
    return {"error_code": refused if refused is not None else ErrorCode.none, "error_message": None,
            "resource_type": resource.resource_type, "resource_name": resource.resource_name}


def _config_refusal(ctx: RequestContext, resource_type: int, name: str, operation: int) -> ErrorCode | None:
    """The error for a principal that may not describe / alter this resource's configs (None: it may)."""
    if resource_type == RESOURCE_TOPIC and not ctx.allowed(operation, TOPIC, name):
        return ErrorCode.topic_authorization_failed
    if resource_type == RESOURCE_GROUP and not ctx.allowed(operation, GROUP, name):
        return ErrorCode.group_authorization_failed
    if resource_type == RESOURCE_BROKER and not ctx.allowed(operation, CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return None


def delete_records(ctx: RequestContext, request: Request) -> dict:
    registry = ctx.broker.registry
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": ErrorCode.none}
            partition = registry.partition(t.name, p.partition_index)
            if not ctx.allowed(DELETE, TOPIC, t.name):
                entry["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                target = partition.high_watermark if p.offset == -1 else p.offset
                try:
                    entry["low_watermark"] = partition.advance_log_start(target)
                except LogError as exc:
                    entry["error_code"] = error_code_for(exc)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _offset_lag(partition) -> int:
    """DescribeLogDirs' offset lag: a follower's distance to its leader's high watermark (as Kafka's), else 0."""
    leader_hw = getattr(partition.replica, "leader_high_watermark", None)
    return max(0, leader_hw - partition.log_end_offset) if leader_hw is not None else 0


def describe_log_dirs(ctx: RequestContext, request: Request) -> Response:
    """DescribeLogDirs: the broker's one log directory, its disk's total and usable bytes, and the size of each
    partition asked for (all of them for a null topic list; topics that do not exist are left out, as Kafka
    does). DESCRIBE on the cluster is needed: without it, CLUSTER_AUTHORIZATION_FAILED and no results."""
    broker = ctx.broker
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results": []}
    registry = broker.registry
    if request.topics is None:
        wanted = {name: list(range(len(topic.partitions))) for name, topic in registry.topics.items()}
    else:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.topic, []).extend(t.partitions)
    topics = []
    for name, indexes in sorted(wanted.items()):
        if registry.get(name) is None:
            continue
        found = {i: registry.partition(name, i) for i in sorted(set(indexes))}
        partitions = [{"partition_index": i, "partition_size": partition.size_bytes,
                       "offset_lag": _offset_lag(partition), "is_future_key": False}
                      for i, partition in found.items() if partition is not None]
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    log_dir = os.path.abspath(broker.config.data_dir)
    try:
        disk = os.statvfs(log_dir)
        total, usable = disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize
    except OSError:
        total = usable = -1
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [
        {"error_code": ErrorCode.none, "log_dir": log_dir, "topics": topics, "total_bytes": total,
         "usable_bytes": usable}]}


APIS = {
    35: (1, 4, describe_log_dirs),
    21: (0, 2, delete_records),
    19: (2, 7, create_topics),
    20: (1, 6, delete_topics),
    37: (0, 3, create_partitions),
    32: (1, 4, describe_configs),
    44: (0, 1, incremental_alter_configs),
    33: (0, 2, alter_configs),
}

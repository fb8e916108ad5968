"""Partition reassignment as ``kafka-reassign-partitions.sh`` does it: a plan in its JSON format
(``{"version": 1, "partitions": [{"topic": ..., "partition": ..., "replicas": [...]}]}``), sent as
AlterPartitionReassignments (KIP-455); progress from ListPartitionReassignments and each replica's log (DescribeLogDirs);
a replication throttle set as its ``--throttle`` sets it: the brokers' ``leader.replication.throttled.rate`` /
``follower.replication.throttled.rate`` and the topics' ``leader.replication.throttled.replicas`` (the partitions'
current replicas) / ``follower.replication.throttled.replicas`` (the replicas being added), removed once nothing is
moving any more.

librdkafka has no call for the two reassignment APIs, so kafka-python's admin connection sends them (as
``quotas.py`` and ``log_dirs.py`` do), to any broker: each one forwards the change to the controllers. The throttle's
configs go through confluent-kafka's IncrementalAlterConfigs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import kafka_python
from .config import admin_config, resolve_bootstrap
from .errors import ClientError, kafka_message

Key = tuple[str, int]

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


class ReassignmentRefused(ClientError):
    """The cluster refused (a whole request, or partitions of it): one line naming Kafka's error for each;
    ``refused``: the partitions refused (every one of the request when the whole request was)."""

    refused: set | None = None


def read_plan(path: str, topic: str | None = None) -> dict[Key, list[int]]:
    """The partitions of a kafka-reassign-partitions plan file (only ``topic``'s when given), each with its target
    replicas; a file that is not such a plan is one ClientError naming what is wrong."""
    with open(path) as f:
        try:
            data = json.load(f)
        except ValueError as exc:
            raise ClientError(f"{path}: not JSON ({exc})") from None
    return parse_plan(data, path, topic)


def parse_plan(data, where: str = "plan", topic: str | None = None) -> dict[Key, list[int]]:
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise ClientError(f'{where}: expected {{"version": 1, "partitions": [{{"topic": ..., "partition": ..., '
                          f'"replicas": [...]}}, ...]}}')
    if data.get("version", 1) != 1:
        raise ClientError(f"{where}: version {data.get('version')!r} is not 1")
    plan: dict[Key, list[int]] = {}
    for i, entry in enumerate(data["partitions"]):
        ok = (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and _is_int(entry.get("partition"))
              and isinstance(entry.get("replicas"), list) and all(map(_is_int, entry["replicas"])))
        if not ok:
            raise ClientError(f"{where}: partitions[{i}] needs a topic (string), a partition (integer) and "
                              "replicas (a list of broker ids)")
        key = (entry["topic"], entry["partition"])
        if key in plan:
            raise ClientError(f"{where}: {key[0]}-{key[1]} is in the plan twice")
        if topic is None or key[0] == topic:
            plan[key] = list(entry["replicas"])
    if not plan:
        raise ClientError(f"{where}: no partition{' of topic ' + topic if topic else ''} to move")
    return plan


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class Moving:
    """A partition being reassigned, and how far each replica being added has come."""

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    # broker -> (offset lag behind the leader's high watermark, bytes on its disk); the leader's bytes under -1
    progress: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def target(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing]


class ReassignmentAdmin:
    def __init__(self, bootstrap: str | None = None, timeout_ms: int = 30_000) -> None:
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout_ms = timeout_ms
        self._admin = None

    def _kafka_python(self):
        if self._admin is None:
            self._admin = kafka_python.admin_client(self.bootstrap, self.timeout_ms)
        return self._admin

    def _send(self, request, node_id: int | None = None):
        from kafka.errors import KafkaError

        try:
            admin = self._kafka_python()
        except KafkaError as exc:
            raise ClientError(str(exc)) from None
        return kafka_python.send(admin, request, node_id)

    # -- the two APIs --------------------------------------------------------------------------------------
    def alter(self, plan: dict[Key, list[int] | None]) -> dict[Key, str | None]:
        """Starts (replicas) or cancels (None) each partition's reassignment; raises ReassignmentRefused naming
        every refused partition (the others are under way)."""
        from kafka.protocol.admin import AlterPartitionReassignmentsRequest

        topic_type = AlterPartitionReassignmentsRequest.ReassignableTopic
        by_topic: dict[str, list] = {}
        for (topic, index), replicas in plan.items():
            by_topic.setdefault(topic, []).append(topic_type.ReassignablePartition(
                partition_index=index, replicas=replicas))
        response = self._send(AlterPartitionReassignmentsRequest(
            timeout_ms=self.timeout_ms, topics=[topic_type(name=t, partitions=ps) for t, ps in by_topic.items()]))
        if response.error_code:
            raise ReassignmentRefused(f"{_name(response.error_code)}: {response.error_message or ''}".rstrip(": "))
        refused = {}
        for topic in response.responses:
            for p in topic.partitions:
                if p.error_code:
                    refused[(topic.name, p.partition_index)] = f"{_name(p.error_code)} ({p.error_message or ''})"
        if refused:
            error = ReassignmentRefused("; ".join(f"{t}-{p}: {why}" for (t, p), why in sorted(refused.items())))
            error.refused = set(refused)
            raise error
        return {key: None for key in plan}

    def ongoing(self, topic: str | None = None) -> list[Moving]:
        """The reassignments in progress (of ``topic`` when given), by topic and partition."""
        from kafka.protocol.admin import ListPartitionReassignmentsRequest

        response = self._send(ListPartitionReassignmentsRequest(timeout_ms=self.timeout_ms, topics=None))
        if response.error_code:
            raise ReassignmentRefused(f"{_name(response.error_code)}: {response.error_message or ''}".rstrip(": "))
        return sorted((Moving(t.name, p.partition_index, list(p.replicas), list(p.adding_replicas),
                              list(p.removing_replicas))
                       for t in response.topics for p in t.partitions if topic is None or t.name == topic),
                      key=lambda m: (m.topic, m.partition))

    def progress(self, moving: list[Moving]) -> list[Moving]:
        """Fills in each adding replica's offset lag and bytes (DescribeLogDirs on its broker) and the bytes of the
        partition's largest replica under key -1 (unknown when a broker does not answer)."""
        from kafka.protocol.admin import DescribeLogDirsRequest

        brokers = {r for m in moving for r in m.replicas}
        found: dict[tuple[int, str, int], tuple[int, int]] = {}
        for broker in sorted(brokers):
            topics = {}
            for m in moving:
                topics.setdefault(m.topic, []).append(m.partition)
            request = DescribeLogDirsRequest(topics=[
                DescribeLogDirsRequest.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in topics.items()])
            try:
                response = self._send(request, node_id=broker)
            except ClientError:
                continue  # that broker is down: its replica's progress is unknown
            for result in response.results:
                for t in result.topics:
                    for p in t.partitions:
                        found[(broker, t.name, p.partition_index)] = (p.offset_lag, p.partition_size)
        for m in moving:
            sizes = [found[(r, m.topic, m.partition)][1] for r in m.replicas if (r, m.topic, m.partition) in found]
            if sizes:
                m.progress[-1] = (0, max(sizes))
            for r in m.adding:
                if (r, m.topic, m.partition) in found:
                    m.progress[r] = found[(r, m.topic, m.partition)]
        return moving

    # -- the throttle --------------------------------------------------------------------------------------
    def _metadata(self):
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(admin_config(self.bootstrap, {"log_level": 0}))  # no librdkafka lines on the terminal
        return admin.list_topics(timeout=self.timeout_ms / 1000)

    def current_replicas(self, keys: list[Key]) -> dict[Key, list[int]]:
        """Each partition's replicas now (Metadata), for the leader side of the throttle; a partition the cluster
        does not have is left out."""
        metadata = self._metadata()
        out = {}
        for topic, index in keys:
            info = metadata.topics.get(topic)
            if info is not None and index in info.partitions:
                out[(topic, index)] = list(info.partitions[index].replicas)
        return out

    def broker_ids(self) -> list[int]:
        return sorted(self._metadata().brokers)

    def set_throttle(self, plan: dict[Key, list[int]], rate: int) -> list[int]:
        """The replication throttle for a plan, as kafka-reassign-partitions --throttle: the rates on every broker
        the move involves, the partitions' current replicas throttled as leaders, the new ones as followers.
        A partition the cluster does not have is left out (its move is refused: nothing of it may stay behind).
        Answers the brokers throttled."""
        current = self.current_replicas(list(plan))
        leaders: dict[str, set[str]] = {}
        followers: dict[str, set[str]] = {}
        for (topic, index), target in plan.items():
            if (topic, index) not in current:
                continue
            now = current[(topic, index)]
            leaders.setdefault(topic, set()).update(f"{index}:{b}" for b in now)
            followers.setdefault(topic, set()).update(f"{index}:{b}" for b in target if b not in now)
        known = set(self.broker_ids())  # a broker the plan names that does not exist: the move is refused anyway
        brokers = sorted({b for key, now in current.items() for b in [*plan[key], *now]} & known)
        configs = {("broker", str(b)): {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)} for b in brokers}
        for topic in sorted(leaders):
            configs[("topic", topic)] = {LEADER_REPLICAS: ",".join(sorted(leaders[topic])),
                                         FOLLOWER_REPLICAS: ",".join(sorted(followers[topic])) or ""}
        self._alter_configs(configs)
        return brokers

    def clear_throttle(self, topics: list[str], brokers: list[int]) -> None:
        """The throttle's rates off ``brokers`` and its replica lists off ``topics`` (those the cluster has: one
        deleted since, or never there, has none to remove)."""
        present = self._metadata().topics
        configs = {("broker", str(b)): {LEADER_RATE: None, FOLLOWER_RATE: None} for b in brokers}
        configs.update({("topic", t): {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None} for t in topics if t in present})
        self._alter_configs(configs)

    def _alter_configs(self, configs: dict[tuple[str, str], dict[str, str | None]]) -> None:
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        admin = AdminClient(admin_config(self.bootstrap, {"log_level": 0}))  # no librdkafka lines on the terminal
        kinds = {"broker": ResourceType.BROKER, "topic": ResourceType.TOPIC}
        resources = [ConfigResource(kinds[kind], name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) if value is not None
            else ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key, value in values.items()]) for (kind, name), values in configs.items()]
        # librdkafka takes one BROKER resource a call (it goes to that broker)
        brokers = [r for r in resources if r.restype == ResourceType.BROKER]
        calls = [[r] for r in brokers] + [[r for r in resources if r.restype != ResourceType.BROKER]]
        futures = {resource: future for call in calls if call
                   for resource, future in admin.incremental_alter_configs(call).items()}
        failed = []
        for resource, future in futures.items():
            try:
                future.result(timeout=self.timeout_ms / 1000)
            except Exception as exc:  # a KafkaException or a timeout: named in the one line
                failed.append(f"{resource.name}: {kafka_message(exc) or type(exc).__name__}")
        if failed:
            raise ClientError("throttle not set: " + "; ".join(failed))

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def _name(code: int) -> str:
    """Kafka's name of an error code (INVALID_REPLICA_ASSIGNMENT), as kio spells it."""
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"

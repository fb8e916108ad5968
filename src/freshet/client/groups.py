"""Consumer-group administration over confluent-kafka: lag, members, offset resets."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from .config import admin_config, consumer_config, resolve_bootstrap
from .errors import ClientError, kafka_message
from .offsets import watermark_offsets


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int  # -1: nothing committed
    log_start_offset: int
    end_offset: int
    member: str = ""

    @property
    def lag(self) -> int:
        """Records between the committed offset (or the log start) and the high watermark."""
        start = self.committed if self.committed >= 0 else self.log_start_offset
        return max(self.end_offset - start, 0)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    members: list[tuple[str, str, str]] = field(default_factory=list)  # (member id, client id, host)
    partitions: list[PartitionLag] = field(default_factory=list)
    protocol: str = "classic"  # or "consumer": Kafka 4's protocol (KIP-848), the broker assigning

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def _protocol(group) -> str:
    """A listed or described group's protocol: 'consumer' (Kafka 4's, KIP-848) or 'classic'."""
    kind = getattr(group, "type", None)
    return "consumer" if kind is not None and kind.name == "CONSUMER" else "classic"


class GroupAdmin:
    def __init__(self, bootstrap: str | None = None, timeout: float = 10.0) -> None:
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout = timeout
        self._admin = AdminClient(admin_config(self.bootstrap, {"log_level": 0}))

    def _wait(self, future, what: str):
        try:
            return future.result(self.timeout)
        except KafkaException as exc:
            raise ClientError(f"{what}: {kafka_message(exc)}") from None

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol: classic or consumer) of every group the cluster knows."""
        try:
            self._admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ClientError(f"cannot reach a broker at {self.bootstrap}: {kafka_message(exc)}") from None
        result = self._wait(self._admin.list_consumer_groups(), "cannot list groups")
        return sorted((g.group_id, g.state.name if g.state else "UNKNOWN", _protocol(g)) for g in result.valid)

    def exists(self, group_id: str) -> bool:
        return any(g == group_id for g, _, _ in self.list_groups())

    def describe(self, group_id: str) -> GroupInfo:
        if not self.exists(group_id):
            raise ClientError(f"group {group_id!r} does not exist")
        description = self._wait(self._admin.describe_consumer_groups([group_id])[group_id],
                                 f"cannot describe group {group_id!r}")
        offsets = self._wait(
            self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id],
            f"cannot read offsets of group {group_id!r}")
        owner: dict[tuple[str, int], str] = {}
        members = []
        for m in description.members:
            members.append((m.member_id, m.client_id, m.host))
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                owner[(tp.topic, tp.partition)] = m.client_id or m.member_id
        committed = {(tp.topic, tp.partition): tp.offset for tp in offsets.topic_partitions}
        keys = sorted(set(committed) | set(owner))
        consumer = Consumer(consumer_config(self.bootstrap, overrides={"log_level": 0}))
        partitions = []
        try:
            for topic, partition in keys:
                low, high = watermark_offsets(consumer, TopicPartition(topic, partition), self.timeout)
                partitions.append(PartitionLag(topic, partition, committed.get((topic, partition), -1), low, high,
                                               owner.get((topic, partition), "")))
        except KafkaException as exc:
            raise ClientError(f"cannot read end offsets: {kafka_message(exc)}") from None
        finally:
            consumer.close()
        return GroupInfo(group_id, description.state.name, members, partitions, _protocol(description))

    def reset_offsets(self, group_id: str, topic: str, *, to_earliest: bool = False, to_latest: bool = False,
                      to_timestamp_ms: int | None = None, shift_by: int | None = None) -> list[tuple[int, int, int]]:
        """Move the group's committed offsets on every partition of ``topic``.

        Refused while the group has active members. Returns (partition, old, new) per partition.
        """
        groups = {g for g, _, _ in self.list_groups()}
        if group_id in groups:
            description = self._wait(self._admin.describe_consumer_groups([group_id])[group_id],
                                     f"cannot describe group {group_id!r}")
            if description.members:
                raise ClientError(f"group {group_id!r} has {len(description.members)} active member(s); "
                                  "stop them before resetting its offsets")
        plan = self.plan_reset(group_id, topic, to_earliest=to_earliest, to_latest=to_latest,
                               to_timestamp_ms=to_timestamp_ms, shift_by=shift_by)
        self._wait(self._admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(topic, p, new) for p, _, new in plan])])[group_id],
            f"cannot reset offsets of group {group_id!r}")
        return plan

    def plan_reset(self, group_id: str, topic: str, partitions: list[int] | None = None, *,
                   to_earliest: bool = False, to_latest: bool = False, to_timestamp_ms: int | None = None,
                   shift_by: int | None = None) -> list[tuple[int, int, int]]:
        """What ``reset_offsets`` would commit, committing nothing: (partition, old, new) for each of
        ``partitions`` (default: every partition of ``topic``); old is -1 where nothing is committed."""
        if sum(x is not None and x is not False for x in (to_earliest or None, to_latest or None,
                                                          to_timestamp_ms, shift_by)) != 1:
            raise ClientError("choose one of --to-earliest, --to-latest, --to-datetime, --shift-by")
        metadata = self._admin.list_topics(timeout=self.timeout)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise ClientError(f"topic {topic!r} does not exist")
        count = len(metadata.topics[topic].partitions)
        chosen = list(range(count)) if partitions is None else sorted(set(partitions))
        if any(not 0 <= p < count for p in chosen):
            raise ClientError(f"topic {topic!r} has partitions 0..{count - 1}, not {chosen}")
        current: dict[int, int] = {}
        if any(g == group_id for g, _, _ in self.list_groups()):
            offsets = self._wait(self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p) for p in chosen])])[group_id],
                "cannot read committed offsets")
            current = {tp.partition: tp.offset for tp in offsets.topic_partitions}
        consumer = Consumer(consumer_config(self.bootstrap, overrides={"log_level": 0}))
        try:
            marks = {p: watermark_offsets(consumer, TopicPartition(topic, p), self.timeout)
                     for p in chosen}
            if to_timestamp_ms is not None:
                found = consumer.offsets_for_times([TopicPartition(topic, p, to_timestamp_ms) for p in chosen],
                                                   timeout=self.timeout)
                by_time = {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1] for tp in found}
        finally:
            consumer.close()
        plan = []
        for p in chosen:
            low, high = marks[p]
            old = current.get(p, -1)
            if to_earliest:
                new = low
            elif to_latest:
                new = high
            elif to_timestamp_ms is not None:
                new = by_time[p]
            else:
                new = min(max((old if old >= 0 else low) + shift_by, low), high)
            plan.append((p, old, new))
        return plan

"""Topic administration over confluent-kafka's AdminClient, with errors a person can read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from .config import admin_config, consumer_config, resolve_bootstrap
from .errors import ClientError, kafka_message
from .offsets import watermark_offsets


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int | None = None  # on the leader's disk (DescribeLogDirs); None where the cluster won't say
    replicas: tuple[int, ...] = ()  # the preferred leader first, as Metadata answers
    isr: tuple[int, ...] = ()

    @property
    def records(self) -> int:
        return self.high_watermark - self.log_start_offset


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    configs: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (value, is_default)


class TopicAdmin:
    def __init__(self, bootstrap: str | None = None, timeout: float = 10.0) -> None:
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout = timeout
        self._all_down = 0  # times librdkafka said every broker it knows (all of the bootstrap's) is down
        self._admin = AdminClient(admin_config(self.bootstrap, {"log_level": 0, "error_cb": self._on_error}))

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._all_down += 1  # said once per outage (served by poll), not again while it lasts

    def _metadata(self, topic: str | None = None):
        """Metadata within ``timeout``, asked in growing slices so that a bootstrap whose every broker refused
        the connection (librdkafka's _ALL_BROKERS_DOWN, served by poll) fails at once instead of at the
        timeout; a dead broker named first with a live one after it is not all brokers down. Only an outage told
        during this call counts: a long-lived admin asked again later waits for brokers that came back."""
        deadline = time.monotonic() + self.timeout
        told = self._all_down
        wait = 0.25
        while True:
            remaining = deadline - time.monotonic()
            try:
                md = self._admin.list_topics(topic=topic, timeout=max(min(wait, remaining), 0.001))
            except KafkaException as exc:
                self._admin.poll(0)
                if self._all_down > told or time.monotonic() >= deadline:
                    raise ClientError(f"cannot reach a broker at {self.bootstrap}: {kafka_message(exc)}") from None
                wait *= 2
                continue
            return md

    def list_topics(self) -> dict[str, int]:
        """Topic name -> partition count (internal topics included, sorted)."""
        md = self._metadata()
        return {name: len(t.partitions) for name, t in sorted(md.topics.items())}

    def partition_count(self, topic: str) -> int:
        md = self._metadata()
        if topic not in md.topics or md.topics[topic].error is not None:
            raise ClientError(f"topic {topic!r} does not exist")
        return len(md.topics[topic].partitions)

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     replica_assignment: list[list[int]] | None = None, replication_factor: int = -1) -> None:
        """``replica_assignment``: the brokers of each partition (the first leads), instead of ``partitions`` and
        ``replication_factor`` (-1: the cluster's default.replication.factor)."""
        _check_broker_ids(replica_assignment)
        self._metadata()  # a clear error when no broker answers
        new = (NewTopic(name, len(replica_assignment), replica_assignment=replica_assignment,
                        config=configs or {}) if replica_assignment
               else NewTopic(name, partitions, replication_factor, config=configs or {}))
        future = self._admin.create_topics([new], operation_timeout=self.timeout)[name]
        try:
            future.result(self.timeout)
        except KafkaException as exc:
            raise ClientError(f"cannot create topic {name!r}: {kafka_message(exc)}") from None

    def ensure_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     existing: dict[str, int] | None = None) -> bool:
        """Create the topic unless it exists (``existing``: a ``list_topics()`` already made). True when this
        call created it; another process creating it meanwhile is no error."""
        if name in (self.list_topics() if existing is None else existing):
            return False
        try:
            self.create_topic(name, partitions, configs)
        except ClientError:
            if name not in self.list_topics():
                raise
            return False
        return True

    def delete_topic(self, name: str) -> None:
        self.partition_count(name)  # "does not exist" rather than the protocol's error name
        try:
            self._admin.delete_topics([name], operation_timeout=self.timeout)[name].result(self.timeout)
        except KafkaException as exc:
            raise ClientError(f"cannot delete topic {name!r}: {kafka_message(exc)}") from None

    def add_partitions(self, name: str, total: int, replica_assignment: list[list[int]] | None = None) -> None:
        """``replica_assignment``: the brokers of each partition added (the first leads)."""
        _check_broker_ids(replica_assignment)
        new = (NewPartitions(name, total, replica_assignment=replica_assignment) if replica_assignment
               else NewPartitions(name, total))
        try:
            self._admin.create_partitions([new])[name].result(self.timeout)
        except KafkaException as exc:
            raise ClientError(f"cannot grow topic {name!r}: {kafka_message(exc)}") from None

    def offsets(self, topic: str, partitions: int) -> list[tuple[int, int]]:
        """(log start offset, high watermark) per partition."""
        consumer = Consumer(consumer_config(self.bootstrap, {"log_level": 0}))
        try:
            return [watermark_offsets(consumer, TopicPartition(topic, p), self.timeout)
                    for p in range(partitions)]
        except KafkaException as exc:
            raise ClientError(f"cannot read offsets of {topic!r}: {kafka_message(exc)}") from None
        finally:
            consumer.close()

    def partition_sizes(self, name: str) -> dict[int, int]:
        """Partition -> bytes of one replica on disk (``LogDirSizes``: DescribeLogDirs through kafka-python's admin
        client, librdkafka has no such call). Empty where it cannot be had: an older broker, no DESCRIBE on the
        cluster."""
        from .log_dirs import LogDirSizes

        log_dirs = LogDirSizes(self.bootstrap, int(self.timeout * 1000))
        try:
            return {p: size for (topic, p), size in log_dirs.sizes([name]).items() if topic == name}
        finally:
            log_dirs.close()

    def describe_topic(self, name: str) -> TopicInfo:
        md = self._metadata()
        topic = md.topics.get(name)
        if topic is None or topic.error is not None:
            raise ClientError(f"topic {name!r} does not exist")
        count = len(topic.partitions)
        offsets = self.offsets(name, count)
        sizes = self.partition_sizes(name)
        partitions = [
            PartitionInfo(p, topic.partitions[p].leader, offsets[p][0], offsets[p][1], sizes.get(p),
                          tuple(topic.partitions[p].replicas), tuple(topic.partitions[p].isrs))
            for p in range(count)
        ]
        configs: dict[str, tuple[str, bool]] = {}
        try:
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            described = self._admin.describe_configs([resource])[resource].result(self.timeout)
            configs = {k: (v.value, v.is_default) for k, v in sorted(described.items())}
        except KafkaException as exc:
            raise ClientError(f"cannot describe configs of {name!r}: {kafka_message(exc)}") from None
        return TopicInfo(name, partitions, configs)


INT32_MAX = 2**31 - 1  # broker ids are int32 on the wire


def _check_broker_ids(replica_assignment: list[list[int]] | None) -> None:
    """ClientError for a broker id librdkafka would wrap to another int32 (4294967296 is broker 0 on the wire)."""
    for index, brokers in enumerate(replica_assignment or ()):
        if wrong := next((b for b in brokers if not 0 <= b <= INT32_MAX), None):
            raise ClientError(f"replica assignment: broker id {wrong} (partition {index}) is not between 0 and "
                              f"{INT32_MAX}")

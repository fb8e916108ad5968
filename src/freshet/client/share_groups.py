"""Share groups (queues on the log) as an operator sees them: members, and per partition where the queue's
window starts, how many records are in flight (acquired by a consumer), waiting to be redelivered, acknowledged
or archived (rejected, or delivered too often), and the backlog nobody has finished with yet.

The broker keeps each share group's state in the compacted topic ``__share_group_state`` (JSON keys and
values: ``["group", G]`` → configs and members, ``["partition", G, topic, partition]`` → the window's start and
end offsets, and base64 bytes with each offset's state and delivery count), so this reads it with a Kafka client
alone, as the other registries are read. librdkafka has no admin call for share groups yet.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from .admin import TopicAdmin
from .errors import ClientError
from .offsets import watermark_offsets
from .reading import read_to_end, reader

SHARE_STATE_TOPIC = "__share_group_state"
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4


@dataclass
class SharePartitionInfo:
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    high_watermark: int = -1
    acquired: int = 0  # in flight: locked to a consumer
    available: int = 0  # came back (released, lock expired, consumer gone): to be delivered again
    acknowledged: int = 0  # in the window (records below the start offset are all done)
    archived: int = 0  # in the window: rejected, or past the delivery count limit
    archived_total: int = 0  # ever archived (the window's and those the start offset has passed)
    # the records in flight or to redeliver, by how often they were delivered so far: {delivery count: records}
    deliveries: dict[int, int] = field(default_factory=dict)

    @property
    def backlog(self) -> int:
        """Records from the start offset on that no consumer has finished with."""
        if self.high_watermark < 0:
            return self.end_offset - self.start_offset - self.acknowledged - self.archived
        return max(self.high_watermark - self.start_offset - self.acknowledged - self.archived, 0)


@dataclass
class ShareGroupInfo:
    group_id: str
    configs: dict[str, str] = field(default_factory=dict)
    members: list[dict] = field(default_factory=list)
    partitions: list[SharePartitionInfo] = field(default_factory=list)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def backlog(self) -> int:
        return sum(p.backlog for p in self.partitions)


def _partition_info(topic: str, partition: int, value: dict) -> SharePartitionInfo:
    """A share-partition's record: its window and one state byte per offset in it (base64)."""
    states = base64.b64decode(value.get("states", ""))
    counts = base64.b64decode(value.get("counts", ""))
    deliveries: dict[int, int] = {}
    for state, count in zip(states, counts):
        if state in (ACQUIRED, AVAILABLE) and count:
            deliveries[count] = deliveries.get(count, 0) + 1
    return SharePartitionInfo(topic, partition, int(value["start_offset"]), int(value.get("end_offset", 0)),
                              acquired=states.count(ACQUIRED), available=states.count(AVAILABLE),
                              acknowledged=states.count(ACKNOWLEDGED), archived=states.count(ARCHIVED),
                              archived_total=int(value.get("archived_total", 0)),
                              deliveries=dict(sorted(deliveries.items())))


def read_share_groups(bootstrap: str, timeout_s: float = 10.0) -> dict[str, ShareGroupInfo]:
    """Every share group the broker keeps state for, with high watermarks filled in (for the backlog)."""
    if SHARE_STATE_TOPIC not in TopicAdmin(bootstrap).list_topics():
        return {}
    latest: dict[str, bytes | None] = {}

    def handle(m) -> None:
        latest[m.key().decode()] = m.value()

    consumer = reader(bootstrap)
    try:
        read_to_end(consumer, [(SHARE_STATE_TOPIC, 0, -2)], handle, timeout_s)
        groups: dict[str, ShareGroupInfo] = {}
        for key, value in latest.items():
            if value is None:
                continue
            try:
                kind, group_id, *rest = json.loads(key)
                data = json.loads(value)
            except (ValueError, TypeError):
                continue
            group = groups.setdefault(group_id, ShareGroupInfo(group_id))
            if kind == "group":
                group.configs = dict(data.get("configs", {}))
                group.members = list(data.get("members", []))
            elif kind == "partition":
                group.partitions.append(_partition_info(rest[0], int(rest[1]), data))
        for group in groups.values():
            group.partitions.sort(key=lambda p: (p.topic, p.partition))
            for p in group.partitions:
                try:
                    _, p.high_watermark = watermark_offsets(consumer, TopicPartition(p.topic, p.partition),
                                                            timeout_s)
                except Exception:  # the topic was deleted meanwhile: the backlog is what the state says
                    p.high_watermark = -1
        return groups
    finally:
        consumer.close()


def describe_share_group(bootstrap: str, group_id: str, timeout_s: float = 10.0) -> ShareGroupInfo:
    groups = read_share_groups(bootstrap, timeout_s)
    if group_id not in groups:
        raise ClientError(f"no share group {group_id!r}")
    return groups[group_id]

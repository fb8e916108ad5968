"""Where replicas and leaders go, beyond one command: what the active controller decides by looking at the whole
metadata (the state machine in ``state`` stays a function of each command).

- **Preferred leaders** (``auto.leader.rebalance.enable``, as Kafka's controller): every
  ``leader.imbalance.check.interval.seconds`` the active controller counts, per broker, the partitions whose
  preferred replica (the first) it is and which another broker leads; above ``leader.imbalance.per.broker.
  percentage`` of them, each such partition whose preferred replica is a live ISR member gets a preferred
  election. After a rolling restart or a failover the leaders go back where the placement spread them.
- **Racks** (``broker.rack``): a new topic's replicas are spread over the racks with Kafka's rack-aware
  assignment (``AdminUtils.assignReplicasToBrokersRackAware``) once any broker has a rack; a broker without one
  counts as a rack of its own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S = 300.0  # Kafka's leader.imbalance.check.interval.seconds
DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE = 10  # leader.imbalance.per.broker.percentage


@dataclass(frozen=True)
class LeaderBalance:
    """The controller's ``auto.leader.rebalance.enable`` and its two settings."""

    enabled: bool = True
    check_interval_s: float = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S
    per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE

    def __post_init__(self) -> None:
        if self.check_interval_s <= 0:
            raise ValueError("leader.imbalance.check.interval.seconds must be positive")
        if not 0 <= self.per_broker_percentage <= 100:
            raise ValueError("leader.imbalance.per.broker.percentage must be between 0 and 100")


def imbalanced_leaders(metadata, percentage: int) -> list[tuple[str, int]]:
    """The partitions a preferred election should give back to their first replica: those of every broker whose
    share of partitions led by another broker (of those it is the preferred replica of) is above
    ``percentage``, where it is a live ISR member, and that are not being reassigned."""
    live = set(metadata.unfenced())
    preferred: dict[int, list[tuple[str, int, bool, bool]]] = defaultdict(list)  # (topic, p, led, electable)
    for topic in sorted(metadata.topics.values(), key=lambda t: t.name):
        for index, part in enumerate(topic.partitions):
            if not part.replicas:
                continue
            first = part.replicas[0]
            moving = getattr(part, "adding_replicas", ()) or getattr(part, "removing_replicas", ())
            electable = first in live and first in part.isr and not moving
            preferred[first].append((topic.name, index, part.leader == first, electable))
    elections = []
    for _, partitions in sorted(preferred.items()):
        elsewhere = [(t, i, electable) for t, i, led, electable in partitions if not led]
        if 100 * len(elsewhere) / len(partitions) > percentage:
            elections.extend((t, i) for t, i, electable in elsewhere if electable)
    return elections


def rack_alternated(racks: dict[int, str | None]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: the brokers taken one rack at a time (racks in name order, the
    brokers of each in id order), so that neighbours in the list sit in different racks."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker in sorted(racks):
        by_rack[racks[broker] or ""].append(broker)
    names = sorted(by_rack)
    queues = [list(by_rack[name]) for name in names]
    arranged: list[int] = []
    index = 0
    while len(arranged) < len(racks):
        if queues[index]:
            arranged.append(queues[index].pop(0))
        index = (index + 1) % len(queues)
    return arranged


def place_replicas_rack_aware(racks: dict[int, str | None], partitions: int, replication_factor: int,
                              start_index: int, shift: int) -> list[list[int]]:
    """Kafka's rack-aware replica assignment (``AdminUtils.assignReplicasToBrokersRackAware``): the first replica
    of partition p is the rack-alternated broker list's ``(start_index + p) mod n``; each next replica is the
    next broker, at a shift that grows each time the first replica wraps round, skipping a broker whose rack
    has a replica while some rack has none, and a broker that has one while some broker has none. Replicas of a
    partition span min(replication factor, racks) racks; leaders and followers spread evenly."""
    arranged = rack_alternated(racks)
    n, rack_count = len(arranged), len({r or "" for r in racks.values()})
    start_index %= n
    shift %= n
    assignment = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas, used_racks, used = [leader], {racks[leader] or ""}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
                rack = racks[broker] or ""
                k += 1
                if (rack not in used_racks or len(used_racks) == rack_count) and (
                        broker not in used or len(used) == n):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        assignment.append(replicas)
    return assignment

"""Where replicas and leaders go, beyond one command: what the active controller decides by looking at the whole
metadata (the state machine in ``state`` stays a function of each command).

- **Preferred leaders** (``auto.leader.rebalance.enable``, as Kafka's controller): every
  ``leader.imbalance.check.interval.seconds`` the active controller counts, per broker, the partitions whose
  preferred replica (the first) it is and which another broker leads; above ``leader.imbalance.per.broker.
  percentage`` of them, each such partition whose preferred replica is a live ISR member gets a preferred
  election. After a rolling restart or a failover the leaders go back where the placement spread them.
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

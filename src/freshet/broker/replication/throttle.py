"""The replication throttle (Kafka's ReplicationQuotaManager, KIP-73), which keeps a partition move from starving
clients: the brokers' ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (bytes/s)
hold back the replication of the replicas that the topics' ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas`` name (``*`` or ``partition:broker`` lists), and only while the
replica is out of the ISR: an in-sync follower (acks=all waits on it) is never held back, nor is any client's fetch.

As Kafka's: a leader over its rate leaves the throttled partitions out of a follower's fetch answer (empty); a
follower over its rate leaves them out of its fetch request. The rate is a token bucket of one second's bytes: a
fetch may take it below zero (one fetch's worth), and the throttled partitions wait until it is positive again.
"""

from __future__ import annotations

import time

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class ReplicationQuota:
    """A byte rate (None: unlimited) and the bytes sent under it."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self.rate: int | None = None
        self._tokens = 0.0
        self._at = clock()
        self.throttled_bytes = 0  # bytes recorded under the quota (a counter, for tests and /metrics)

    def set_rate(self, rate: int | None) -> None:
        """A new rate: what was spent beyond the old one stays owed; a rate set where there was none starts with
        one second's bytes."""
        if rate != self.rate:
            self._refill()
            previous, self.rate = self.rate, rate
            if rate is not None:
                self._tokens = float(rate) if previous is None else min(self._tokens, float(rate))

    def _refill(self) -> None:
        now = self._clock()
        if self.rate is not None:
            self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def exceeded(self) -> bool:
        if self.rate is None:
            return False
        self._refill()
        return self._tokens < 0

    def record(self, nbytes: int) -> None:
        self.throttled_bytes += nbytes
        if self.rate is not None:
            self._refill()
            self._tokens -= nbytes

    def delay_s(self) -> float:
        """How long until the quota lets bytes through again (0 when it does now)."""
        if not self.exceeded():
            return 0.0
        return -self._tokens / self.rate if self.rate else 1.0


def parse_rate(value: str | None) -> int | None:
    """A rate config's value: bytes/s, or None (unset: unlimited, Kafka's Long.MAX_VALUE)."""
    if value is None or not str(value).strip().isdigit():
        return None
    return int(str(value).strip())


def throttled_partitions(value: str | None, partitions: int, node_id: int) -> set[int]:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on broker ``node_id``: every one for
    ``*``, else those listed as ``partition:node_id``."""
    if not value or not value.strip():
        return set()
    if value.strip() == "*":
        return set(range(partitions))
    out = set()
    for item in value.split(","):
        partition, _, broker = item.strip().partition(":")
        if partition.strip().isdigit() and broker.strip().isdigit() and int(broker) == node_id:
            out.add(int(partition))
    return out


class ReplicationThrottle:
    """One broker's two quotas and the partitions they hold back, from the cluster metadata (``update``)."""

    def __init__(self, node_id: int, clock=time.monotonic) -> None:
        self.node_id = node_id
        self.leader = ReplicationQuota(clock)
        self.follower = ReplicationQuota(clock)
        self.leader_partitions: set[tuple[str, int]] = set()
        self.follower_partitions: set[tuple[str, int]] = set()

    def update(self, leader_rate: int | None, follower_rate: int | None,
               leader_partitions: set[tuple[str, int]], follower_partitions: set[tuple[str, int]]) -> None:
        self.leader.set_rate(leader_rate)
        self.follower.set_rate(follower_rate)
        self.leader_partitions = leader_partitions
        self.follower_partitions = follower_partitions

    def update_from_view(self, view) -> None:
        """The rates (this broker's own, else the cluster default) and throttled replicas of a ``ClusterView``."""
        lead: set[tuple[str, int]] = set()
        follow: set[tuple[str, int]] = set()
        for name, info in view.topics.items():
            count = len(info.partitions)
            lead.update((name, p) for p in throttled_partitions(info.configs.get(LEADER_REPLICAS), count,
                                                                 self.node_id))
            follow.update((name, p) for p in throttled_partitions(info.configs.get(FOLLOWER_REPLICAS), count,
                                                                   self.node_id))
        self.update(parse_rate(view.broker_config(LEADER_RATE, self.node_id)),
                    parse_rate(view.broker_config(FOLLOWER_RATE, self.node_id)), lead, follow)

    def hold_leader(self, key: tuple[str, int], in_sync: bool) -> bool:
        """A leader answering a follower's fetch of ``key``: leave it out this time?"""
        return not in_sync and key in self.leader_partitions and self.leader.exceeded()

    def hold_follower(self, key: tuple[str, int], in_sync: bool) -> bool:
        """A follower about to fetch ``key``: leave it out this time?"""
        return not in_sync and key in self.follower_partitions and self.follower.exceeded()

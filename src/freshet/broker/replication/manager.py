"""The replica manager: what this broker does for each partition the cluster metadata gives it a replica of.

The control plane (``freshet.broker.cluster``) calls ``apply`` with the whole metadata after every change. For each
partition with a replica here this broker becomes its leader (stamps its leader epoch into what it appends,
records where the epoch begins, counts its followers' progress: ``leader.LeaderState``) or a follower (a fetcher
per leader broker: ``follower.ReplicaFetcher``), or stops. The produce and fetch handlers ask it who leads
(``check``), for the leader state of a partition (acks=all, followers' fetches) and for KIP-951's leader hints.

A partition the metadata does not name (the broker's own internal topics in this first step) is none of its
business: it stays this broker's alone, as on a one-node broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import replace
from typing import Iterable, Mapping

from kio.schema.errors import ErrorCode

from ..durability import write_json_atomically
from .follower import Followed, FollowerState, ReplicaFetcher
from .leader import LeaderState, ReplicationError
from .metadata import AlterIsr, BrokerEndpoint, PartitionState
from .throttle import ReplicationThrottle

log = logging.getLogger(__name__)

CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_INTERVAL_S = 5.0  # replica.high.watermark.checkpoint.interval.ms

__all__ = ["AlterIsr", "BrokerEndpoint", "PartitionState", "ReplicaManager", "ReplicationError"]


class ReplicaManager:
    def __init__(self, broker, node_id: int, alter_isr: AlterIsr, replica_lag_time_max_ms: int = 10_000) -> None:
        self.broker = broker
        self.node_id = node_id
        self.alter_isr = alter_isr
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.states: dict[tuple[str, int], PartitionState] = {}  # every partition of the metadata
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.leaders: dict[tuple[str, int], LeaderState] = {}
        self.followed: dict[tuple[str, int], Followed] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.isr_shrinks = 0  # kafka.server:type=ReplicaManager,name=IsrShrinksPerSec (a counter here)
        self.isr_expands = 0
        self.throttle = ReplicationThrottle(node_id)  # leader/follower.replication.throttled.* (reassignments)
        self._tasks: set[asyncio.Task] = set()
        self._checker: asyncio.Task | None = None
        self._checkpointer: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        # high watermarks as of the last checkpoint (Kafka's replication-offset-checkpoint): a partition opens with
        # its high watermark at its log end, which may hold records no follower had; the first role it takes
        # starts from what was known to be committed instead
        self._checkpoint_path = os.path.join(broker.config.data_dir, CHECKPOINT)
        self._checkpointed = _read_checkpoint(self._checkpoint_path)
        self._started: set[tuple[str, int]] = set()

    # -- metadata ------------------------------------------------------------------------

    async def apply(self, partitions: Iterable[PartitionState], brokers: Mapping[int, BrokerEndpoint]) -> None:
        """The whole metadata, after every change (idempotent): become leader, follower, or stop, partition by
        partition. Topics must already exist in ``broker.registry`` with the same partition count."""
        async with self._lock:
            if self._closed:
                return  # a last metadata while the broker stops: nothing started again
            self.brokers = dict(brokers)
            view = getattr(getattr(self.broker, "cluster", None), "view", None)
            if view is not None:
                self.throttle.update_from_view(view)
            if self._checker is None:
                loop = asyncio.get_running_loop()
                self._checker = loop.create_task(self._check_lagging(), name="isr-check")
                self._checkpointer = loop.create_task(self._checkpoint_regularly(), name="hw-checkpoint")
            states = {(p.topic, p.index): p for p in partitions}
            for key, state in states.items():
                if self.node_id not in state.replicas:
                    self._stop(key)
                    self._remove_replica(key)
                    continue
                partition = self.broker.registry.partition(state.topic, state.index)
                if partition is None:
                    log.warning("%s-%d: a replica here, but no such partition in the local registry", *key)
                    self._stop(key)
                    continue
                if key not in self._started:
                    self._started.add(key)
                    known = self._checkpointed.get(f"{state.topic}/{state.index}", partition.log_start_offset)
                    partition.high_watermark = max(partition.log_start_offset, min(partition.high_watermark, known))
                if state.leader == self.node_id:
                    self._lead(key, partition, state)
                else:
                    self._follow(key, partition, state)
            for key in set(self.states) - set(states):  # its topic deleted: nothing of it kept
                self._stop(key)
                self._started.discard(key)
                self._checkpointed.pop(f"{key[0]}/{key[1]}", None)
            self.states = states
            for leader_id, fetcher in list(self.fetchers.items()):
                if not fetcher.partitions:
                    del self.fetchers[leader_id]
                    await fetcher.close()

    def _min_insync(self, topic: str) -> int:
        """min.insync.replicas: the cluster metadata's (topic config, else the cluster default), else the
        local topic's config."""
        view = getattr(getattr(self.broker, "cluster", None), "view", None)
        if view is not None:
            return int(view.min_insync_replicas(topic, self.node_id))
        found = self.broker.registry.get(topic)
        if found is None:
            return 1
        value = found.configs.get("min.insync.replicas", found.defaults.get("min.insync.replicas", "1"))
        return int(value)

    def _lead(self, key: tuple[str, int], partition, state: PartitionState) -> None:
        current = self.leaders.get(key)
        if current is not None and current.partition is partition and current.leader_epoch == state.leader_epoch:
            current.update(state, self._min_insync(state.topic))
            return
        self._stop(key)
        partition.leader_epoch = state.leader_epoch
        partition.leader_epochs.assign(state.leader_epoch, partition.log_end_offset)
        leader = LeaderState(self, partition, state, self._min_insync(state.topic))
        partition.replica = leader
        self.leaders[key] = leader
        log.info("%s-%d: leader in epoch %d from offset %d, ISR %s", *key, state.leader_epoch,
                 partition.log_end_offset, list(state.isr))
        leader.maybe_advance()

    def _follow(self, key: tuple[str, int], partition, state: PartitionState) -> None:
        followed = self.followed.get(key)
        endpoint = self.brokers.get(state.leader)
        if followed is not None and followed.partition is partition \
                and followed.state.leader == state.leader and followed.state.leader_epoch == state.leader_epoch:
            followed.state = followed.follower.state = state
            followed.paused_until = 0.0
        else:
            self._stop(key)
            follower = FollowerState(state)
            partition.replica = follower
            followed = Followed(partition, state, follower)
            self.followed[key] = followed
        if state.leader < 0 or endpoint is None:
            return  # offline, or a leader we have no endpoint for yet: the next metadata says more
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            fetcher = self.fetchers[state.leader] = ReplicaFetcher(self, endpoint)
        else:
            fetcher.retarget(endpoint)
        if fetcher.partitions.get(key) is not followed:
            fetcher.add(key, followed)

    def _stop(self, key: tuple[str, int]) -> None:
        leader = self.leaders.pop(key, None)
        if leader is not None:
            leader.resign()
            leader.partition.replica = FollowerState(self.states.get(key))  # its high watermark stays put
        followed = self.followed.pop(key, None)
        if followed is not None:
            fetcher = self.fetchers.get(followed.state.leader)
            if fetcher is not None:
                fetcher.remove(key)

    def _remove_replica(self, key: tuple[str, int]) -> None:
        """A partition this broker holds no replica of (a reassignment moved it away, or it moved while this broker
        was down): its local log is deleted and an empty one takes its place in the topic (Kafka deletes the
        replica's log directory). The broker's internal ``__`` topics keep theirs (their stores hold the log)."""
        topic = self.broker.registry.get(key[0])
        if topic is None or topic.internal or key[0].startswith("__") or key[1] >= len(topic.partitions):
            return
        partition = topic.partitions[key[1]]
        if partition.log_end_offset == 0 and partition.log_start_offset == 0 and partition.size_bytes == 0:
            return  # never held anything here
        partition.delete()
        topic.partitions[key[1]] = topic.open_partition(key[1])
        self._started.discard(key)
        self._checkpointed.pop(f"{key[0]}/{key[1]}", None)
        log.info("%s-%d: no longer a replica here; its local log is deleted", *key)

    def role(self, topic: str, index: int) -> PartitionState | None:
        """What this broker believes of the partition (None: not in the metadata)."""
        return self.states.get((topic, index))

    # -- for the handlers ----------------------------------------------------------------

    def check(self, topic: str, index: int,
              current_leader_epoch: int = -1) -> tuple[ErrorCode | None, LeaderState | None]:
        """(error, leader state) for a client's request on the partition: (None, None) for a partition the
        metadata does not name (this broker's own); FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the
        client's leader epoch is older / newer than ours, NOT_LEADER_OR_FOLLOWER when we do not lead it."""
        key = (topic, index)
        state = self.states.get(key)
        if state is None:
            return None, None
        if current_leader_epoch >= 0:
            if current_leader_epoch < state.leader_epoch:
                return ErrorCode.fenced_leader_epoch, None
            if current_leader_epoch > state.leader_epoch:
                return ErrorCode.unknown_leader_epoch, None
        leader = self.leaders.get(key)
        if leader is None:
            return ErrorCode.not_leader_or_follower, None
        return None, leader

    def hold_for_follower(self, leader: LeaderState, replica_id: int) -> bool:
        """The replication throttle: leave this partition out of follower ``replica_id``'s fetch answer now?"""
        return self.throttle.hold_leader((leader.topic, leader.index), replica_id in leader.isr)

    def sent_to_follower(self, leader: LeaderState, replica_id: int, nbytes: int) -> None:
        """Bytes of a throttled partition sent to a follower out of the ISR count against the leader's rate."""
        if replica_id not in leader.isr and (leader.topic, leader.index) in self.throttle.leader_partitions:
            self.throttle.leader.record(nbytes)

    def current_leader(self, topic: str, index: int) -> dict:
        """KIP-951's CurrentLeader of a partition: the leader and epoch this broker knows."""
        state = self.states.get((topic, index))
        if state is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}

    def node_endpoints(self, node_ids: Iterable[int]) -> list[dict]:
        """KIP-951's NodeEndpoints: where the named brokers listen."""
        out = []
        for node_id in sorted(set(node_ids)):
            endpoint = self.brokers.get(node_id)
            if endpoint is not None:
                out.append({"node_id": node_id, "host": endpoint.host, "port": endpoint.port, "rack": endpoint.rack})
        return out

    @property
    def under_replicated_partitions(self) -> int:
        """Partitions this broker leads with fewer ISR members than replicas (Kafka's UnderReplicatedPartitions,
        kafka.server:type=ReplicaManager)."""
        return sum(1 for leader in self.leaders.values() if len(leader.isr) < len(leader.replicas))

    def isr_changed(self, leader: LeaderState, why: str) -> None:
        key = (leader.topic, leader.index)
        if why == "shrink":
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
        state = self.states.get(key)
        if state is not None and state.leader == self.node_id:
            self.states[key] = replace(state, isr=leader.isr, partition_epoch=leader.partition_epoch)

    # -- background ----------------------------------------------------------------------

    def spawn(self, coroutine, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check_lagging(self) -> None:
        """As Kafka's isr-expiration task: every half replica.lag.time.max.ms."""
        while True:
            await asyncio.sleep(self.replica_lag_time_max_ms / 2000)
            for leader in list(self.leaders.values()):
                try:
                    leader.check_lagging()
                except Exception:
                    log.exception("%s-%d: ISR check failed", leader.topic, leader.index)

    def checkpoint(self) -> None:
        """Write every replicated partition's high watermark (fsync'd, replaced atomically) if any moved."""
        marks = dict(self._checkpointed)
        for topic, index in self._started:
            partition = self.broker.registry.partition(topic, index)
            if partition is not None:
                marks[f"{topic}/{index}"] = partition.high_watermark
        if marks != self._checkpointed:
            write_json_atomically(self._checkpoint_path, marks)
            self._checkpointed = marks

    async def _checkpoint_regularly(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            try:
                self.checkpoint()
            except OSError as exc:
                log.error("high watermark checkpoint not written: %s", exc)

    async def close(self) -> None:
        self._closed = True
        for key in list(self.leaders) + list(self.followed):
            self._stop(key)
        if self._checkpointer is not None:
            try:
                self.checkpoint()
            except OSError as exc:
                log.error("high watermark checkpoint not written: %s", exc)
        tasks = [t for t in (self._checker, self._checkpointer, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for fetcher in list(self.fetchers.values()):
            await fetcher.close()
        self.fetchers.clear()


def _read_checkpoint(path: str) -> dict[str, int]:
    try:
        with open(path) as f:
            return {str(k): int(v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as exc:
        log.error("%s unreadable (%s): high watermarks start at the log start offsets", path, exc)
        return {}

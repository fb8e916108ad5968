"""Partitions this broker follows: one fetcher per leader broker (Kafka's ReplicaFetcherThread).

A fetcher holds one connection to its leader and, for every partition it follows there:
1. on becoming follower (or after OFFSET_OUT_OF_RANGE), truncation first: OffsetForLeaderEpoch for the latest
   epoch in the local epoch cache, and the log cut where the leader's copy of that epoch ends (KIP-101 /
   KIP-279: when the leader answers an older epoch, the follower's own end of that epoch bounds the cut too, and
   it asks again), so a suffix written by a deposed leader never survives;
2. then Fetch (v12, ``replica_id`` = this node) from the log end: the leader's batches are appended as they
   are (offsets and leader epochs kept, the producer state following them), fsync'd, and only then is the next
   Fetch sent: the offset a follower reports to its leader is on its disk. The follower's high watermark is the
   leader's, bounded by what it has fsync'd.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from freshet.log import LogError, Partition, StorageError
from freshet.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET

from .client import BrokerConnection
from .metadata import BrokerEndpoint, PartitionState


log = logging.getLogger(__name__)

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
FETCH_MAX_WAIT_MS = 500  # replica.fetch.wait.max.ms
FETCH_MIN_BYTES = 1  # replica.fetch.min.bytes
PARTITION_MAX_BYTES = 1 << 20  # replica.fetch.max.bytes
RESPONSE_MAX_BYTES = 10 << 20  # replica.fetch.response.max.bytes
BACKOFF_S = 0.2  # replica.fetch.backoff.ms (Kafka: 1000): also the wait for a leader that learns late it leads
WAITING_FOR_METADATA = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                        ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
                        ErrorCode.unknown_topic_id}


class FollowerState:
    """What ``Partition.replica`` holds on a follower: the leader's high watermark, bounded by our fsync."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.leader_high_watermark = 0

    def flushed(self, partition: Partition) -> None:
        self.follow(partition)

    def follow(self, partition: Partition) -> None:
        hw = min(self.leader_high_watermark, partition.durable_offset)
        if hw > partition.high_watermark:
            partition.high_watermark = hw


@dataclass(slots=True)
class Followed:
    partition: Partition
    state: PartitionState
    follower: FollowerState
    truncated: bool = False  # truncation done since it became follower in this epoch
    paused_until: float = 0.0  # the leader refused it: wait for newer metadata (or this time)


class ReplicaFetcher:
    def __init__(self, manager, leader: BrokerEndpoint) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], Followed] = {}
        self._changed = asyncio.Event()
        self._connection: BrokerConnection | None = None
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader.node_id}")

    def add(self, key: tuple[str, int], followed: Followed) -> None:
        self.partitions[key] = followed
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self._changed.set()

    def retarget(self, leader: BrokerEndpoint) -> None:
        """The leader broker's endpoint changed (it came back on another port): reconnect."""
        if (leader.host, leader.port) != (self.leader.host, self.leader.port):
            self.leader = leader
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self.leader = leader

    async def close(self) -> None:
        # the flag as well as the cancel: asyncio.wait_for (3.11) can swallow a cancel that lands as the event it
        # waits for is set (remove() sets it just before close() is called)
        self._closed = True
        self._changed.set()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if self._connection is not None:
            self._connection.close()

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            now = loop.time()
            active = {k: f for k, f in self.partitions.items() if f.paused_until <= now}
            if not active:
                self._changed.clear()
                wake = min((f.paused_until for f in self.partitions.values()), default=None)
                try:
                    await asyncio.wait_for(self._changed.wait(), None if wake is None else max(0.01, wake - now))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                if self._connection is None:
                    self._connection = BrokerConnection(
                        self.leader.host, self.leader.port, f"freshet-replica-{self.manager.node_id}",
                        sasl=self.manager.broker.config.security.inter_broker_login())
                for key, followed in active.items():
                    if not followed.truncated:
                        await self._truncate(key, followed)
                active = {k: f for k, f in active.items() if f.truncated and self.partitions.get(k) is f}
                if active:
                    await self._fetch(active)
            except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
                log.info("replica fetcher %d -> leader %d at %s:%d: %s", self.manager.node_id, self.leader.node_id,
                         self.leader.host, self.leader.port, exc)
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                await asyncio.sleep(BACKOFF_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher %d -> leader %d failed", self.manager.node_id, self.leader.node_id)
                await asyncio.sleep(BACKOFF_S)

    def _pause(self, followed: Followed, why) -> None:
        log.info("%s-%d: leader %d answered %s; waiting for newer metadata", followed.state.topic,
                 followed.state.index, self.leader.node_id, why)
        followed.paused_until = asyncio.get_running_loop().time() + BACKOFF_S

    async def _truncate(self, key: tuple[str, int], followed: Followed) -> None:
        """KIP-279: ask where the leader's copy of our latest epoch ends, cut there; again when the leader
        answered an older epoch than we asked for (our own end of that one is then the bound)."""
        partition, state = followed.partition, followed.state
        for _ in range(100):
            epochs = partition.leader_epochs
            if not epochs.entries:
                # nothing written in any epoch we know of: only what the leader said was committed is kept
                partition.truncate_to(partition.high_watermark)
                break
            asked = epochs.latest_epoch
            response = await self._connection.request(23, OFFSET_FOR_LEADER_EPOCH_VERSION, {
                "replica_id": self.manager.node_id,
                "topics": [{"topic": state.topic, "partitions": [
                    {"partition": state.index, "current_leader_epoch": state.leader_epoch, "leader_epoch": asked}]}],
            })
            if self.partitions.get(key) is not followed:
                return  # stopped or retargeted while the question was out
            answer = response.topics[0].partitions[0]
            if answer.error_code != ErrorCode.none:
                self._pause(followed, answer.error_code.name)
                return
            end = partition.log_end_offset
            if answer.end_offset == UNDEFINED_OFFSET:
                partition.truncate_to(partition.high_watermark)  # the leader knows no epoch: as Kafka
                break
            if answer.leader_epoch == UNDEFINED_EPOCH:
                partition.truncate_to(min(answer.end_offset, end))
                break
            own_epoch, own_end = epochs.end_offset_for(answer.leader_epoch, end)
            if own_epoch == UNDEFINED_EPOCH:
                partition.truncate_to(min(answer.end_offset, end))
                break
            if own_epoch != answer.leader_epoch:
                partition.truncate_to(min(own_end, end))  # we never had the leader's epoch: ask again
                continue
            partition.truncate_to(min(answer.end_offset, own_end, end))
            break
        followed.follower.follow(partition)
        followed.truncated = True
        log.info("%s-%d: follower of %d in epoch %d from offset %d", state.topic, state.index, self.leader.node_id,
                 state.leader_epoch, partition.log_end_offset)

    async def _fetch(self, active: dict[tuple[str, int], Followed]) -> None:
        throttle = self.manager.throttle
        held = {k for k, f in active.items() if throttle.hold_follower(k, self.manager.node_id in f.state.isr)}
        if held:  # follower.replication.throttled.rate reached: those partitions wait (Kafka's follower quota)
            active = {k: f for k, f in active.items() if k not in held}
            if not active:
                await asyncio.sleep(min(max(throttle.follower.delay_s(), 0.01), 1.0))
                return
        topics: dict[str, list] = {}
        for (topic, index), followed in active.items():
            partition = followed.partition
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": followed.state.leader_epoch,
                # what is on our disk (a deposed leader's last appends may not be yet: fetched again, skipped)
                "fetch_offset": partition.durable_offset, "last_fetched_epoch": partition.leader_epochs.latest_epoch,
                "log_start_offset": partition.log_start_offset, "partition_max_bytes": PARTITION_MAX_BYTES})
        response = await self._connection.request(1, FETCH_VERSION, {
            "replica_id": self.manager.node_id, "max_wait": FETCH_MAX_WAIT_MS, "min_bytes": FETCH_MIN_BYTES,
            "max_bytes": RESPONSE_MAX_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 30)
        if response.error_code != ErrorCode.none:
            raise ConnectionError(f"fetch answered {response.error_code.name}")
        commit = self.manager.broker.group_commit
        written: list[tuple[Followed, int]] = []
        for topic in response.responses:
            for answer in topic.partitions:
                followed = self.partitions.get((topic.topic, answer.partition_index))
                if followed is None or followed is not active.get((topic.topic, answer.partition_index)):
                    continue  # stopped or retargeted while the fetch was out
                partition = followed.partition
                code = answer.error_code
                if code == ErrorCode.offset_out_of_range:
                    if partition.log_end_offset < answer.log_start_offset:
                        partition.truncate_fully(answer.log_start_offset)
                    else:
                        followed.truncated = False
                    continue
                if code in WAITING_FOR_METADATA:
                    self._pause(followed, code.name)
                    continue
                if code != ErrorCode.none:
                    self._pause(followed, code.name)
                    continue
                followed.follower.leader_high_watermark = answer.high_watermark
                records = answer.records
                if records and (topic.topic, answer.partition_index) in throttle.follower_partitions \
                        and self.manager.node_id not in followed.state.isr:
                    throttle.follower.record(len(records))
                if records:
                    try:
                        partition.append_as_follower(records)
                    except (LogError, ValueError) as exc:
                        log.error("%s-%d: batches from leader %d refused: %s", topic.topic, answer.partition_index,
                                  self.leader.node_id, exc)
                        self._pause(followed, "a batch this log refused")
                        continue
                    commit.written(partition)
                    written.append((followed, partition.log_end_offset - 1))
                else:
                    followed.follower.follow(partition)
                _follow_log_start(partition, answer.log_start_offset)
        if written:
            # only what is on our disk is reported to the leader (the next fetch's offset)
            results = await asyncio.gather(*(commit.flushed(f.partition, last) for f, last in written),
                                           return_exceptions=True)
            for (followed, _), result in zip(written, results):
                if isinstance(result, StorageError):
                    # not durable: cut back to what is (the cut is fsync'd) and fetch it again
                    log.error("%s-%d: %s; cut back to offset %d", followed.state.topic, followed.state.index,
                              result, followed.partition.durable_offset)
                    followed.partition.truncate_to(followed.partition.durable_offset)
                elif isinstance(result, BaseException):
                    raise result
                else:
                    followed.follower.follow(followed.partition)


def _follow_log_start(partition: Partition, leader_log_start: int) -> None:
    """The leader's log start moved (DeleteRecords, retention): ours follows, up to our high watermark (Kafka's
    follower: maybeIncrementLogStartOffset from the fetch response)."""
    start = min(leader_log_start, partition.high_watermark)
    if start > partition.log_start_offset:
        partition.advance_log_start(start)

"""A partition this broker leads: its followers' progress, the high watermark, ISR changes and acks=all.

As Kafka's Partition on the leader: each follower's fetch offset is that follower's log end offset (a follower
fetches the next offset only once what it has is fsync'd, so it is durable there); the high watermark is the
smallest of the leader's own fsync'd log end and every ISR follower's, and never goes back. A follower that
has not caught up with the leader's log end within ``replica.lag.time.max.ms`` leaves the ISR (one whose log end
is the leader's never does: an idle partition keeps its ISR); one that reaches
the high watermark (in this leader's epoch) joins it again. Both go to the controller (``alter_isr``,
AlterPartition), which checks the leader epoch and partition epoch; the ISR used here changes when it agrees.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from freshet.log import Partition, StorageError

from .metadata import PartitionState


log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
# AlterPartition refusals checked against the partition epoch the leader sent, so the change was not made, by this
# or any earlier try (Kafka's Partition.handleAlterPartitionError). After any other refusal (INVALID_UPDATE_VERSION,
# REQUEST_TIMED_OUT, ...) an earlier try whose answer was lost (a controller failover) may have made it: a follower
# being added keeps counting for the high watermark until the metadata says (a newer partition epoch)
NOT_MADE = ("INELIGIBLE_REPLICA", "INVALID_REQUEST", "OPERATION_NOT_ATTEMPTED")


class ReplicationError(Exception):
    """An acks=all write that cannot be answered as written: the Kafka error code and why."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class FollowerProgress:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: float = 0.0  # the last time its log end reached the leader's (Kafka's lastCaughtUpTimeMs)
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET


def now_ms() -> float:
    return time.monotonic() * 1000


class LeaderState:
    def __init__(self, manager, partition: Partition, state: PartitionState,
                 min_insync: int) -> None:
        self.manager = manager
        self.partition = partition
        self.topic, self.index = state.topic, state.index
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = state.replicas
        self.isr = state.isr
        self.min_insync = min_insync
        self.epoch_start_offset = partition.log_end_offset
        now = now_ms()
        # as Kafka on becoming leader: the followers' log ends unknown, the ISR members taken as caught up now
        self.followers = {r: FollowerProgress(last_caught_up_ms=now if r in state.isr else 0.0)
                          for r in state.replicas if r != manager.node_id}
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self._altering = False
        # KIP-497's maximal ISR: a follower being added counts for the high watermark from the moment the change is
        # sent, not once the controller agreed; else a write acknowledged meanwhile by the old ISR alone could be
        # missing on a replica the controller then lets lead (a reassignment completes on that very change)
        self._joining: tuple[int, ...] = ()

    # -- metadata ------------------------------------------------------------------------

    def update(self, state: PartitionState, min_insync: int) -> None:
        """The controller's view of the partition, same leader epoch (an ISR change, a reassignment)."""
        self.min_insync = min_insync
        if state.partition_epoch < self.partition_epoch:
            return  # older than what an AlterPartition already told us
        if state.partition_epoch > self.partition_epoch:
            # the controller decided (a change sent with the older epoch is refused): the ISR says who joined. The
            # same epoch again (metadata that changed elsewhere) says nothing of a change still out
            self._joining = ()
        self.partition_epoch = state.partition_epoch
        self.isr = state.isr
        self.replicas = state.replicas
        for r in state.replicas:
            if r != self.manager.node_id and r not in self.followers:
                self.followers[r] = FollowerProgress()
        for r in list(self.followers):
            if r not in state.replicas:
                del self.followers[r]
        self.maybe_advance()

    def resign(self) -> None:
        """No longer the leader: writes waiting for the ISR are answered NOT_LEADER_OR_FOLLOWER."""
        if not self.lost.done():
            self.lost.set_result(None)

    # -- the high watermark --------------------------------------------------------------

    def flushed(self, partition: Partition) -> None:
        """The group commit fsync'd this partition (called before it answers its waiters)."""
        self._advance()

    def _advance(self) -> bool:
        hw = self.partition.durable_offset
        me = self.manager.node_id
        for r in (*self.isr, *self._joining):
            if r != me:
                progress = self.followers.get(r)
                hw = min(hw, progress.log_end_offset if progress is not None else UNKNOWN_OFFSET)
        if hw > self.partition.high_watermark:
            self.partition.high_watermark = hw
            return True
        return False

    def maybe_advance(self) -> None:
        if self._advance():
            commit = self.manager.broker.group_commit
            if commit is not None:
                commit.high_watermark_advanced()

    def follower_fetched(self, replica_id: int, fetch_offset: int) -> ErrorCode | None:
        """A Fetch from replica ``replica_id`` at ``fetch_offset``: its log end offset. None, or the error to
        answer (not a replica of this partition; past the log end: it must truncate first; before the log start: it
        must start its log there), nothing changed then."""
        progress = self.followers.get(replica_id)
        if progress is None:
            return ErrorCode.not_leader_or_follower
        leader_end = self.partition.log_end_offset
        if fetch_offset > leader_end or fetch_offset < self.partition.log_start_offset:
            return ErrorCode.offset_out_of_range
        now = now_ms()
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = now
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now
        progress.leader_end_at_last_fetch = leader_end
        self.maybe_advance()
        if replica_id not in self.isr and fetch_offset >= self.partition.high_watermark \
                and fetch_offset >= self.epoch_start_offset:
            self._alter(tuple(r for r in self.replicas if r in self.isr or r == replica_id), "expand")
        return None

    def check_lagging(self) -> None:
        """Shrink the ISR by the followers out of sync: as Kafka's Replica.isCaughtUp, a follower whose log end is
        the leader's is in sync however long ago it last fetched (an idle partition loses nobody: a dead broker
        leaves the ISR when the controller fences it); any other must have caught up with the leader's log end
        within replica.lag.time.max.ms."""
        limit = now_ms() - self.manager.replica_lag_time_max_ms
        me = self.manager.node_id
        leader_end = self.partition.log_end_offset
        lagging = {r for r in self.isr if r != me and (
            (progress := self.followers.get(r)) is None
            or (progress.log_end_offset != leader_end and progress.last_caught_up_ms < limit))}
        if lagging:
            self._alter(tuple(r for r in self.isr if r not in lagging), "shrink")
        elif self._joining and not self._altering:  # a change of unknown outcome: asked again for an answer
            self._alter(tuple(r for r in self.replicas if r in self.isr or r in self._joining), "expand")

    def _alter(self, new_isr: tuple[int, ...], why: str) -> None:
        if self._altering or self.lost.done() or set(new_isr) == set(self.isr):
            return
        self._altering = True
        if why == "expand":
            self._joining = tuple(r for r in new_isr if r not in self.isr)
        self.manager.spawn(self._send_alter(new_isr, why), f"alter-isr-{self.topic}-{self.index}")

    async def _send_alter(self, new_isr: tuple[int, ...], why: str) -> None:
        try:
            result = await self.manager.alter_isr(self.topic, self.index, self.leader_epoch, self.partition_epoch,
                                                  new_isr)
        except Exception as exc:  # the controller unreachable: tried again at the next check or fetch
            # (the change may have been made: a follower being added keeps counting until the metadata says)
            log.warning("%s-%d: ISR %s to %s not sent: %r", self.topic, self.index, why, new_isr, exc)
            return
        finally:
            self._altering = False
        if self.lost.done():
            return
        if result.get("error_code", 0):
            log.info("%s-%d: ISR %s to %s refused: %s %s", self.topic, self.index, why, new_isr,
                     result.get("error"), result.get("message"))
            if result.get("error") in NOT_MADE:
                self._joining = ()
            return
        self._joining = ()
        value = result.get("value") or {}
        partition_epoch = value.get("partition_epoch", self.partition_epoch + 1)
        if partition_epoch > self.partition_epoch:  # else the metadata brought this change (or a later one) first
            self.isr = tuple(value.get("isr", new_isr))
            self.partition_epoch = partition_epoch
        self.manager.isr_changed(self, why)
        log.info("%s-%d: ISR %s to %s (partition epoch %d)", self.topic, self.index, why, list(self.isr),
                 self.partition_epoch)
        self.maybe_advance()

    # -- acks=all ------------------------------------------------------------------------

    async def acknowledged(self, last_offset: int, timeout_s: float) -> None:
        """Returns once the high watermark has passed ``last_offset`` with an ISR of at least min.insync.replicas;
        else raises ReplicationError (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
        REQUEST_TIMED_OUT) or StorageError."""
        commit = self.manager.broker.group_commit
        replicated = commit.durable(self.partition, last_offset)  # completes when the HW passes the offset
        try:
            await asyncio.wait({replicated, self.lost}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not replicated.done():
                replicated.cancel()
        if replicated.cancelled():
            if self.lost.done():
                raise ReplicationError(ErrorCode.not_leader_or_follower,
                                       f"this broker stopped leading {self.topic}-{self.index} before the ISR had "
                                       f"offset {last_offset}")
            raise ReplicationError(ErrorCode.request_timed_out,
                                   f"the ISR {list(self.isr)} did not have offset {last_offset} within "
                                   f"{timeout_s * 1000:.0f} ms")
        exc = replicated.exception()
        if exc is not None:
            raise exc if isinstance(exc, StorageError) else StorageError(str(exc))
        if len(self.isr) < self.min_insync:
            raise ReplicationError(ErrorCode.not_enough_replicas_after_append,
                                   f"the ISR {list(self.isr)} of {self.topic}-{self.index} shrank below "
                                   f"min.insync.replicas={self.min_insync} while the write waited")

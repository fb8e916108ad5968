"""The share-group coordinator (KIP-932): queues on the log.

A share group's members compete for records: every member is assigned every partition of the topics it
subscribes to (Kafka's "simple" assignor, which also lets more members than partitions share the work),
and each record is handed to one member at a time by its partition's ``SharePartition``. Membership is
KIP-848's heartbeat protocol (member epoch 0 joins, -1 leaves; the group epoch moves on every change);
ShareFetch and ShareAcknowledge run in a share session per member (epoch 0 opens it, -1 closes it and
releases what the member still holds, otherwise each request carries the next epoch).

State lives in the compacted internal topic ``__share_group_state``: one record per share-partition
(its window, see ``SharePartition.snapshot``) and one per group (its configs). A change is appended as it
happens; acknowledgements are answered only once their record is fsync'd, so after kill -9 no
acknowledged record is delivered again and every unacknowledged one comes back.

In a cluster (``clustered``) the topic is replicated and its leader is the share coordinator (``follow``, whose
``store`` answers keys 83-87, see ``share_state``); a partition's leader keeps the share-partitions of the
partition in memory, loads each from the share coordinator the first time it serves it in a leader epoch
(``to_load`` / ``load``) and writes every change through ``persister`` (``cluster.share_persister``), whose
futures say when the coordinator's ISR has it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import orjson
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import encode_batch
from freshet.log import StorageError

from ..config import ShareSettings
from ..topics.registry import TopicRegistry
from .reaper import Reaper
from .share_partition import SharePartition
from .offsets import failed_append_code
from .share_state import ShareStateStore, StateError, group_key as _group_key, partition_key as _partition_key
from .topics import GroupTopics, RegistryTopics

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
LEAVE_EPOCH = -1
JOIN_EPOCH = 0
CHECK_INTERVAL_S = 0.1  # sessions and record locks, while a group has members or locked records
LOAD_TIMEOUT_S = 5.0  # a share fetch waits this long for the share coordinator (its partition is left out after)


# group config name -> (settings field, parse, check): what IncrementalAlterConfigs may set on a GROUP
GROUP_CONFIGS = {
    "share.record.lock.duration.ms": ("record_lock_duration_ms", int, lambda v: 1_000 <= v <= 3_600_000),
    "share.delivery.count.limit": ("delivery_count_limit", int, lambda v: 2 <= v <= 10),
    "share.session.timeout.ms": ("session_timeout_ms", int, lambda v: 1_000 <= v <= 1_800_000),
    "share.heartbeat.interval.ms": ("heartbeat_interval_ms", int, lambda v: 100 <= v <= 60_000),
    "share.auto.offset.reset": ("auto_offset_reset", str, lambda v: v in ("earliest", "latest")),
    "share.isolation.level": ("isolation_level", str, lambda v: v in ("read_uncommitted", "read_committed")),
}


class ShareGroupError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    last_seen: float = field(default_factory=time.monotonic)
    previous_epoch: int = -1
    sent_assignment: dict[str, tuple[int, ...]] | None = None


@dataclass
class ShareSession:
    next_epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)  # (topic, partition)
    rotation: int = 0  # where the next fetch starts in the sorted partitions


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    sessions: dict[str, ShareSession] = field(default_factory=dict)
    partitions: dict[tuple[str, int], SharePartition] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    deleting: bool = False  # DeleteGroups awaits its state and configs deleted in a cluster: no member joins meanwhile

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


class ShareGroupCoordinator:
    def __init__(self, registry: TopicRegistry, settings: ShareSettings | None = None,
                 clustered: bool = False) -> None:
        self.registry = registry
        # the topics members subscribe to and are assigned: this broker's own (one node), the cluster's metadata in
        # a cluster (set by its membership: a topic this broker holds no replica of is assigned too); ShareFetch and
        # ShareAcknowledge are served by each partition's leader, from its own registry
        self.topics: GroupTopics = RegistryTopics(registry)
        self.settings = settings or ShareSettings()
        self.groups: dict[str, ShareGroup] = {}
        self.state = registry.internal_topic(SHARE_STATE_TOPIC, SHARE_STATE_TOPIC_CONFIGS).partitions[0]
        self.store = ShareStateStore(self.append_state)  # the latest value of every key, while this broker writes it
        self._reaper = Reaper(self.expire, "share-group-timers")
        self._available: set[asyncio.Future] = set()  # a cancelled one leaves at once
        self.on_append = lambda partition: None  # the broker's group commit: appended state gets fsync'd
        self.clustered = clustered
        # cluster mode, set by the broker: the leader epoch of a partition this broker leads (None: it does not),
        # and the share-partition leader's client of the share coordinator
        self.led_epoch = lambda topic, index: None
        self.persister = None
        self.coordinator_epoch: int | None = None  # cluster: the leader epoch in which this broker leads the topic
        self.cluster_configs: dict[str, dict[str, str]] = {}  # cluster: every group's configs, from the metadata
        self._loading: dict[tuple, asyncio.Future] = {}
        if not clustered:
            self._replay()

    # -- settings ---------------------------------------------------------------------------

    def setting(self, group: ShareGroup | None, name: str):
        if group is not None:
            for key, (attr, parse, _) in GROUP_CONFIGS.items():
                if attr == name and key in group.configs:
                    return parse(group.configs[key])
        return getattr(self.settings, name)

    @staticmethod
    def validate_config(name: str, value: str | None) -> None:
        if name not in GROUP_CONFIGS:
            raise ShareGroupError(ErrorCode.invalid_config, f"unknown group config {name!r}")
        if value is None:
            return
        _, parse, ok = GROUP_CONFIGS[name]
        try:
            parsed = parse(value)
        except ValueError:
            raise ShareGroupError(ErrorCode.invalid_config, f"{name}={value!r} is not valid") from None
        if not ok(parsed):
            raise ShareGroupError(ErrorCode.invalid_config, f"{name}={value!r} is out of range")

    def configs_of(self, group_id: str) -> dict[str, str]:
        """A group's own configs: in a cluster the metadata's (set through any broker, a group not created yet
        included, as Kafka's GROUP configs), on one node its own."""
        if self.clustered:
            return dict(self.cluster_configs.get(group_id, {}))
        group = self.groups.get(group_id)
        return dict(group.configs) if group is not None else {}

    def take_configs(self, configs: dict[str, dict[str, str]]) -> None:
        """Cluster mode: the groups' configs as the cluster metadata now holds them (``cluster.membership`` on every
        change), applied to the groups this broker holds (a lower delivery count limit archives what waits)."""
        self.cluster_configs = {group_id: dict(values) for group_id, values in configs.items()}
        for group in self.groups.values():
            wanted = self.cluster_configs.get(group.group_id, {})
            if group.configs != wanted:
                group.configs = dict(wanted)
                self._archive_exhausted(group)

    def alter_configs(self, group_id: str, changes: dict[str, str | None]) -> int:
        """One node: set (None: remove) group configs; returns the offset to wait on. Validate first. (A cluster's
        are its metadata: ``take_configs``.)"""
        group = self.group(group_id, create=True)
        for name, value in changes.items():
            if value is None:
                group.configs.pop(name, None)
            else:
                group.configs[name] = value
        self._archive_exhausted(group)  # a lower delivery count limit applies to what is waiting now
        return self._write_group(group)

    def _archive_exhausted(self, group: ShareGroup) -> None:
        """Records delivered as often as the group's limit allows are archived, never delivered again."""
        limit = self.setting(group, "delivery_count_limit")
        changed = [key for key, sp in group.partitions.items() if sp.archive_exhausted(limit)]
        if changed:
            self.write_partitions(group, changed)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._reaper.start()

    async def stop(self) -> None:
        await self._reaper.stop()

    def group(self, group_id: str, create: bool = False) -> ShareGroup | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = ShareGroup(group_id, configs=dict(self.cluster_configs.get(group_id, {})))
        return g

    def delete(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        if group is None:
            raise ShareGroupError(ErrorCode.group_id_not_found)
        if group.members:
            raise ShareGroupError(ErrorCode.non_empty_group)
        del self.groups[group_id]
        if self.clustered:  # its state is deleted at the share coordinator, its configs in the cluster metadata
            return -1
        records = [(_partition_key(group_id, t, p), None) for (t, p) in group.partitions]
        records.append((_group_key(group_id), None))
        return self._append(records)

    # -- membership (ShareGroupHeartbeat) ----------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscribed: tuple[str, ...] | None,
                  rack_id: str | None, client_id: str, client_host: str) -> dict:
        if not group_id:
            raise ShareGroupError(ErrorCode.invalid_group_id, "the group id must not be empty")
        if not member_id:
            raise ShareGroupError(ErrorCode.invalid_request, "the member id must not be empty")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                self._remove_member(group, member_id)
            return {"member_id": member_id, "member_epoch": LEAVE_EPOCH, "assignment": None}
        if member_epoch == JOIN_EPOCH:
            if not subscribed:
                raise ShareGroupError(ErrorCode.invalid_request, "a joining member must subscribe to topics")
            group = self.group(group_id, create=True)
            assert group is not None
            if group.deleting:  # as Kafka's Dead group: the member finds its coordinator again and rejoins
                raise ShareGroupError(ErrorCode.coordinator_not_available, f"the group {group_id} is being deleted")
            if member_id not in group.members and len(group.members) >= self.settings.max_size:
                raise ShareGroupError(ErrorCode.group_max_size_reached)
            group.epoch += 1
            member = ShareMember(member_id, group.epoch, client_id, client_host, rack_id, tuple(subscribed))
            # a member that joins again (fenced, or its coordinator moved: in a cluster this broker may have taken
            # it on as a partition's leader) keeps what it holds, as Kafka's share-partition leaders do: its share
            # session goes on, its records are released when the session or the membership ends
            group.members[member_id] = member
            self._write_group(group)  # the group exists from now on, across restarts too
            self._reaper.due(time.monotonic())
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                raise ShareGroupError(ErrorCode.unknown_member_id, f"{member_id} is not a member of {group_id}")
            if member_epoch not in (member.epoch, member.previous_epoch):
                raise ShareGroupError(ErrorCode.fenced_member_epoch,
                                      f"epoch {member_epoch} is not the member's epoch {member.epoch}")
            member.last_seen = time.monotonic()
            if subscribed is not None and tuple(subscribed) != member.subscribed:
                member.subscribed = tuple(subscribed)
                group.epoch += 1
                self._write_group(group)
        assignment = self._assignment(member)
        if member.epoch != group.epoch:
            member.previous_epoch, member.epoch = member.epoch, group.epoch
        body = {"member_id": member_id, "member_epoch": member.epoch, "assignment": None}
        if assignment != member.sent_assignment or member_epoch == JOIN_EPOCH:
            member.sent_assignment = assignment
            body["assignment"] = assignment
        return body

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.setting(self.groups.get(group_id), "heartbeat_interval_ms")

    def _assignment(self, member: ShareMember) -> dict[str, tuple[int, ...]]:
        """Every partition of every subscribed topic that exists: members share partitions."""
        out = {}
        for name in member.subscribed:
            topic = self.topics.get(name)
            if topic is not None and not topic.internal:
                out[name] = tuple(range(topic.partitions))
        return out

    def _remove_member(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.sessions.pop(member_id, None)
        group.epoch += 1
        self._release(group, member_id)
        self._write_group(group)

    def _release(self, group: ShareGroup, member_id: str) -> None:
        limit = self.setting(group, "delivery_count_limit")
        changed = []
        for key, sp in group.partitions.items():
            if sp.release_member(member_id, limit):
                changed.append(key)
        if changed:
            self.write_partitions(group, changed)
            self.wake()

    # -- share sessions ---------------------------------------------------------------------

    def member(self, group_id: str | None, member_id: str | None) -> tuple[ShareGroup, ShareMember]:
        if not group_id:
            raise ShareGroupError(ErrorCode.invalid_group_id, "the group id must not be empty")
        group = self.groups.get(group_id)
        member = group.members.get(member_id or "") if group is not None else None
        if group is None or member is None:
            raise ShareGroupError(ErrorCode.unknown_member_id, f"{member_id} is not a member of {group_id}")
        member.last_seen = time.monotonic()
        # a member may be taken on here, not by its join (a share-partition leader's, in a cluster): the checks
        # run while it is around (a comparison when they already do)
        self._reaper.due(member.last_seen + CHECK_INTERVAL_S)
        return group, member

    def session(self, group: ShareGroup, member_id: str, epoch: int, opening_allowed: bool) -> ShareSession:
        """The member's share session for a request at ``epoch`` (0 opens a new one); the epoch moves on."""
        if epoch == JOIN_EPOCH:
            if not opening_allowed:
                raise ShareGroupError(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a session")
            if member_id in group.sessions:
                self._release(group, member_id)  # a new session: what the old one held comes back
            session = group.sessions[member_id] = ShareSession(1)
            return session
        session = group.sessions.get(member_id)
        if session is None:
            raise ShareGroupError(ErrorCode.share_session_not_found, f"no share session for {member_id}")
        if epoch != LEAVE_EPOCH:
            if epoch != session.next_epoch:
                raise ShareGroupError(ErrorCode.invalid_share_session_epoch,
                                      f"epoch {epoch}, expected {session.next_epoch}")
            session.next_epoch = 1 if session.next_epoch == 0x7FFFFFFF else session.next_epoch + 1
        return session

    def close_session(self, group: ShareGroup, member_id: str) -> None:
        if group.sessions.pop(member_id, None) is not None:
            self._release(group, member_id)

    def existing_partition(self, group: ShareGroup, topic: str, index: int) -> SharePartition | None:
        """The group's share-partition of ``topic``/``index`` if it has one for the topic as it is now (a topic
        deleted, or deleted and created again, leaves state that belongs to no log: it is dropped). In a cluster,
        only while this broker leads the partition in the leader epoch it loaded it in (else it is forgotten here:
        the coordinator holds what its leader last wrote)."""
        sp = group.partitions.get((topic, index))
        if sp is not None and self.clustered:
            if sp.leader_epoch is None or sp.leader_epoch != self.led_epoch(topic, index) \
                    or sp.log is not self.registry.partition(topic, index):
                del group.partitions[(topic, index)]
                return None
            return sp
        if sp is not None and sp.log is not self.registry.partition(topic, index):
            del group.partitions[(topic, index)]
            self._append([(_partition_key(group.group_id, topic, index), None)])
            return None
        return sp

    def share_partition(self, group: ShareGroup, topic: str, index: int) -> SharePartition | None:
        """The group's share-partition, started (by share.auto.offset.reset) on first use."""
        key = (topic, index)
        sp = self.existing_partition(group, topic, index)
        if sp is None and self.clustered:
            return None  # loaded from the share coordinator first (load)
        if sp is None:
            log_partition = self.registry.partition(topic, index)
            if log_partition is None:
                return None
            earliest = self.setting(group, "auto_offset_reset") == "earliest"
            start = log_partition.log_start_offset if earliest else self.upper(group, log_partition)
            sp = group.partitions[key] = SharePartition(log_partition, start)
        return sp

    # -- cluster mode: the share-partition leader's loads ----------------------------------------------------

    def to_load(self, group: ShareGroup, keys, recheck: bool = False) -> list[tuple[str, int, int]]:
        """(topic, index, leader epoch) of the partitions among ``keys`` this broker leads and has not loaded the
        group's share-partition of in that leader epoch (cluster mode; none on one node); ``recheck`` (a member
        opens a share session): those loaded too, read again in case their offsets were reset or deleted since
        (a new state epoch at the coordinator, which no write of this leader's has met yet)."""
        if not self.clustered:
            return []
        out = []
        for topic, index in keys:
            epoch = self.led_epoch(topic, index)
            if epoch is not None and (recheck or self.existing_partition(group, topic, index) is None):
                out.append((topic, index, epoch))
        return out

    async def load(self, group: ShareGroup, wanted: list[tuple[str, int, int]]) -> None:
        """Read the share-partitions ``wanted`` (``to_load``) from the share coordinator, concurrently, each once
        however many fetches ask; a share-partition it never stored starts by share.auto.offset.reset, and that
        start is written at once (a leader after this one starts there too). Raises the coordinator's error."""
        waits = []
        for topic, index, epoch in wanted:
            key = (group.group_id, topic, index, epoch)
            fut = self._loading.get(key)
            if fut is None:
                fut = self._loading[key] = asyncio.ensure_future(self._load_one(group, topic, index, epoch))
                fut.add_done_callback(lambda _f, key=key: self._loading.pop(key, None))
            waits.append(fut)
        await asyncio.gather(*waits)

    async def _load_one(self, group: ShareGroup, topic: str, index: int, epoch: int) -> None:
        live = self.registry.get(topic)
        log_partition = self.registry.partition(topic, index)
        if live is None or log_partition is None:
            return
        value = await self.persister.read(group.group_id, topic, live.topic_id, index, epoch, LOAD_TIMEOUT_S)
        if self.led_epoch(topic, index) != epoch or self.registry.partition(topic, index) is not log_partition:
            return  # the partition moved on while it was read: the next fetch loads it again
        current = self.existing_partition(group, topic, index)
        if current is not None and current.leader_epoch == epoch and (
                int(value.get("state_epoch", 0)) == current.state_epoch if value is not None
                else not current.stored):  # not reset or deleted since it was loaded (or not written yet)
            return
        if value is not None and int(value.get("start_offset", -1)) >= 0:
            sp = SharePartition.restore(log_partition, value)
            sp.state_epoch = int(value.get("state_epoch", 0))
            fresh = False
        else:
            earliest = self.setting(group, "auto_offset_reset") == "earliest"
            sp = SharePartition(log_partition, log_partition.log_start_offset if earliest
                                else self.upper(group, log_partition))
            if value is not None:  # deleted in that state epoch: the fresh start is written in it
                sp.state_epoch = int(value.get("state_epoch", 0))
            fresh = True
        sp.leader_epoch = epoch
        self.groups.setdefault(group.group_id, group).partitions[(topic, index)] = sp
        log.info("share group %s: %s-%d loaded in leader epoch %d at offset %d", group.group_id, topic, index,
                 epoch, sp.start_offset)
        if sp.archive_exhausted(self.setting(group, "delivery_count_limit")) or fresh:
            self.write_partitions(group, [(topic, index)])

    def upper(self, group: ShareGroup, log_partition) -> int:
        if self.setting(group, "isolation_level") == "read_committed":
            return log_partition.last_stable_offset
        return log_partition.high_watermark

    # -- persistence -------------------------------------------------------------------------

    def follow(self, leader_epoch: int | None) -> None:
        """Cluster mode, after every metadata change: ``leader_epoch`` is the epoch in which this broker leads
        ``__share_group_state`` (None: another broker does). A broker that becomes its leader is the share
        coordinator: it reads the topic to its log end (what the ISR replicated from the previous one); one that
        stops leading it forgets it. (The groups' configs are the cluster metadata's: ``take_configs``.)"""
        if leader_epoch == self.coordinator_epoch:
            return
        self.coordinator_epoch = leader_epoch
        if leader_epoch is None:
            self.store.clear()
            log.info("no longer the share coordinator")
            return
        self.store.load(self.state, self.state.log_end_offset)
        log.info("share coordinator in epoch %d: %d share-partition states taken over", leader_epoch,
                 sum(1 for key in self.store.values if key.startswith(b'["partition"')))

    def _replay(self) -> None:
        self.store.load(self.state)
        for key, value in self.store.values.items():
            try:
                kind, *rest = orjson.loads(key)
                data = orjson.loads(value)
            except (orjson.JSONDecodeError, ValueError):
                log.warning("skipping an unreadable record in %s", SHARE_STATE_TOPIC)
                continue
            group = self.group(rest[0], create=True)
            assert group is not None
            if kind == "group":
                group.configs = dict(data.get("configs", {}))
                group.epoch = max(group.epoch, int(data.get("epoch", 0)))
            elif kind == "partition":
                topic, index = rest[1], int(rest[2])
                log_partition = self.registry.partition(topic, index)
                live = self.registry.get(topic)
                if log_partition is not None and data.get("topic_id") == str(live.topic_id) \
                        and int(data.get("start_offset", -1)) >= 0:  # not a deleted state (no window)
                    group.partitions[(topic, index)] = SharePartition.restore(log_partition, data)
        for group in self.groups.values():
            group.epoch += 1  # members rejoin after a restart: their old epochs are fenced
            self._write_group(group)
            self._archive_exhausted(group)

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append to ``__share_group_state``; the offset to wait on. In a cluster only its leader appends (-1, at
        once durable, elsewhere: a group's configs and members are then this broker's own)."""
        if self.clustered and self.coordinator_epoch is None:
            return -1
        now = int(time.time() * 1000)
        result = self.state.append(encode_batch([(k, v, now) for k, v in records]))
        self.store.apply(records)
        self.on_append(self.state)
        return result.last_offset

    def append_state(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """``_append`` for the share coordinator's APIs: a log that fails (a full disk) is StateError with the code
        Kafka's coordinators answer then (NOT_COORDINATOR), nothing applied."""
        try:
            return self._append(records)
        except StorageError as exc:
            raise StateError(failed_append_code(exc), str(exc)) from None

    def _write_group(self, group: ShareGroup) -> int:
        """One node: the group's configs and members as they are now (members for tools only: after a restart they
        rejoin). A cluster keeps the configs in its metadata and has the members rejoin a new coordinator."""
        if self.clustered:
            return -1
        members = [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                    "member_epoch": m.epoch, "subscribed": list(m.subscribed)} for m in group.members.values()]
        return self._append([(_group_key(group.group_id),
                              orjson.dumps({"configs": group.configs, "epoch": group.epoch, "members": members}))])

    def forget_partitions(self, group: ShareGroup, keys) -> int:
        """DeleteShareGroupOffsets: the share-partitions start afresh (by share.auto.offset.reset) next time."""
        for key in keys:
            del group.partitions[key]
        return self._append([(_partition_key(group.group_id, t, p), None) for t, p in keys])

    def write_partitions(self, group: ShareGroup, keys):
        """Append the share-partitions ``keys`` as they are now; returns what to wait on for durability (one node:
        the offset; in a cluster: the persister's futures, see ``replicated``; partitions this broker no longer
        leads left out)."""
        if self.clustered:
            waits = []
            for t, p in keys:
                sp = self.existing_partition(group, t, p)
                topic = self.registry.get(t)
                if sp is not None and topic is not None:
                    fut = self.persister.write(group.group_id, t, topic.topic_id, p, sp.leader_epoch,
                                               sp.state_epoch, sp.snapshot())
                    fut.add_done_callback(lambda f, key=(t, p), sp=sp: self._written(group, key, sp, f))
                    waits.append(fut)
            return waits
        records = []
        for t, p in keys:
            topic = self.registry.get(t)
            snapshot = group.partitions[(t, p)].snapshot()
            snapshot["topic_id"] = str(topic.topic_id) if topic is not None else None
            records.append((_partition_key(group.group_id, t, p), orjson.dumps(snapshot)))
        return self._append(records)

    @staticmethod
    def _written(group: ShareGroup, key: tuple[str, int], sp: SharePartition, fut: asyncio.Future) -> None:
        """Cluster mode: a share-partition the coordinator holds (``stored``); one whose write was fenced (its
        offsets reset or deleted: a newer state epoch; a newer leader) is forgotten, the next fetch reads it."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            sp.stored = True
        elif getattr(exc, "error_code", None) in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch) \
                and group.partitions.get(key) is sp:
            log.info("share group %s: %s-%d fenced (%s), read again next time", group.group_id, *key, exc)
            del group.partitions[key]

    @staticmethod
    def replicated(written) -> asyncio.Future:
        """Cluster mode: done once what ``write_partitions`` returned is in the ISR of the share coordinator's
        ``__share_group_state`` (raising the coordinator's error when it is not)."""
        return asyncio.ensure_future(_all(written))

    # -- waking long polls, timers -------------------------------------------------------------

    def records_available(self) -> asyncio.Future:
        """A future done when records come back (released, lock expired, member gone)."""
        fut = asyncio.get_running_loop().create_future()
        self._available.add(fut)
        fut.add_done_callback(self._available.discard)  # a long poll that timed out cancels it: gone at once
        return fut

    def wake(self) -> None:
        waiters, self._available = self._available, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def expire(self, now: float) -> float | None:
        """Members silent past their session timeout leave; record locks past their deadline let go. Checked
        every 0.1 s while a group has members or records locked (the reaper's next check), else not at all:
        records are locked by members only, and a member's join wakes the reaper."""
        active = False
        for group in list(self.groups.values()):
            timeout = self.setting(group, "session_timeout_ms") / 1000
            for member in list(group.members.values()):
                if now - member.last_seen > timeout:
                    log.info("share group %s: member %s timed out", group.group_id, member.member_id)
                    self._remove_member(group, member.member_id)
            limit = self.setting(group, "delivery_count_limit")
            changed = [key for key, sp in group.partitions.items() if sp.expire_locks(now, limit)]
            if changed:
                self.write_partitions(group, changed)
                self.wake()
            active = active or bool(group.members) or any(
                sp.earliest_deadline != float("inf") for sp in group.partitions.values())
        return now + CHECK_INTERVAL_S if active else None


async def _all(futures) -> None:
    await asyncio.gather(*futures)

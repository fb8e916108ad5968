"""The consumer group protocol of Kafka 4 (KIP-848): the broker assigns, members reconcile.

A member sends ConsumerGroupHeartbeat with its subscription (topic names or a regular expression) and
the partitions it owns; the broker answers with its member epoch and, when it changed, the partitions it
should own. Every change of membership, subscription or subscribed topics' partitions moves the *group
epoch*; the broker then computes a *target assignment* for that epoch with a server-side assignor
(``uniform``, sticky and balanced, Kafka's default; or ``range``) and brings each member to it on that
member's own heartbeats, without stopping the others:

- a member that must give partitions up is first asked to revoke them (it stays at its epoch, state
  "unrevoked partitions") and moves on once its heartbeat no longer lists them, or is fenced after its
  rebalance timeout;
- a partition is handed to its new owner only once no other member still owns it (until then the new
  owner is at the new epoch with the rest, state "unreleased partitions");
- everyone else keeps consuming throughout: there is no stop-the-world rebalance.

Member epoch 0 joins (1.x clients name their member id; v0 clients are given one), -1 leaves, -2 is a
static member leaving for a while (its partitions wait for it under its ``group.instance.id`` until the
session timeout, except those it was revoking; back under a new member id, it takes them over and is
reconciled against the target of the moment, as Kafka's static member replacement). A heartbeat from an
earlier epoch is FENCED_MEMBER_EPOCH, unless it is the previous epoch and the member owns nothing it should
not (a lost response). OffsetCommit names the member and its epoch: STALE_MEMBER_EPOCH if that is not the
member's current one.

Membership is kept in memory and, on a cluster, in ``__consumer_offsets`` as Kafka's ConsumerGroup* records
(consumer_records.py, through ``on_change``): the next coordinator takes the members over at their epochs. A
one-node broker restarted forgets them (members get UNKNOWN_MEMBER_ID and rejoin); committed offsets are in
``__consumer_offsets`` as for classic groups.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..config import ConsumerGroupSettings
from ..durability import write_json_atomically
from ..topics.registry import TopicRegistry
from .reaper import Reaper
from .topics import GroupTopics, RegistryTopics

log = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
# a member's state on its way to the target assignment
MEMBER_STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"
ASSIGNORS = ("uniform", "range")

Assignment = dict[str, frozenset[int]]  # topic name -> partitions


class ConsumerGroupError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


# Kafka 4.0's consumer-group configs (GroupConfig, KIP-848): a group's own value overrides the broker's
# group.consumer.* setting of that name for that group
CONSUMER_GROUP_CONFIGS = {"consumer.session.timeout.ms": "session_timeout_ms",
                          "consumer.heartbeat.interval.ms": "heartbeat_interval_ms"}


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = MEMBER_STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    revocation_deadline: float = 0.0
    last_seen: float = field(default_factory=time.monotonic)
    sent: Assignment | None = None  # the assignment last sent to the member

    def owns(self) -> Assignment:
        out = {t: set(ps) for t, ps in self.assigned.items()}
        for t, ps in self.pending_revocation.items():
            out.setdefault(t, set()).update(ps)
        return {t: frozenset(ps) for t, ps in out.items() if ps}


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0  # the group epoch
    assignment_epoch: int = 0  # the epoch the target assignment was computed for
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    topics_seen: tuple = ()  # (topic, partition count) of the subscribed topics at the last check
    assignor: str = "uniform"
    # ids of the members whose stored records may have changed since ``on_change`` last looked (a dict: in order);
    # the store (consumer_records) encodes only those again. Whatever changes a member's fields touches it.
    touched: dict[str, None] = field(default_factory=dict, compare=False, repr=False)
    # the members' distinct subscriptions, (topic names, regex): None once a member joins, leaves or changes its
    # own, to be listed again. A heartbeat looks the subscribed topics up per subscription, not per member.
    subscriptions: frozenset | None = field(default=None, compare=False, repr=False)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state != MEMBER_STABLE for m in self.members.values()):
            return RECONCILING
        return STABLE

    def touch(self, member_id: str) -> None:
        self.touched[member_id] = None

    def admit(self, member: ConsumerMember) -> None:
        """``member`` is in the group (new, or in an old one's place): its subscription is listed again."""
        self.members[member.member_id] = member
        self.subscriptions = None

    def forget(self, member_id: str) -> None:
        """The member is no longer in the group: its stored records go (touched), the subscriptions are listed
        again."""
        del self.members[member_id]
        self.touch(member_id)
        self.subscriptions = None

    def distinct_subscriptions(self) -> frozenset[tuple[tuple[str, ...], str | None]]:
        if self.subscriptions is None:
            self.subscriptions = frozenset((m.subscribed_names, m.subscribed_regex) for m in self.members.values())
        return self.subscriptions

    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None


def _normalize(assignment: dict) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def uniform_assignment(subscriptions: dict[str, set[str]], partitions: dict[str, int],
                       previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """Every partition to one subscribed member, counts as even as the subscriptions allow, and partitions
    kept where they were whenever that is still balanced (Kafka's uniform assignor's promises)."""
    owner: dict[tuple[str, int], str] = {}
    counts = {m: 0 for m in subscriptions}
    for m in sorted(previous):
        if m not in subscriptions:
            continue
        for t, ps in previous[m].items():
            if t not in subscriptions[m] or t not in partitions:
                continue
            for p in ps:
                if p < partitions[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    counts[m] += 1
    eligible = {t: sorted(m for m, topics in subscriptions.items() if t in topics) for t in partitions}
    for t in sorted(partitions):
        for p in range(partitions[t]):
            if (t, p) not in owner and eligible[t]:
                m = min(eligible[t], key=lambda x: (counts[x], x))
                owner[(t, p)] = m
                counts[m] += 1
    moved = True
    while moved:  # each move lowers the sum of squared counts, so this ends
        moved = False
        for (t, p), a in sorted(owner.items(), key=lambda kv: (-counts[kv[1]], kv[0])):
            b = min(eligible[t], key=lambda x: (counts[x], x))
            if counts[b] < counts[a] - 1:
                owner[(t, p)] = b
                counts[a] -= 1
                counts[b] += 1
                moved = True
    out: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return {m: _normalize(a) for m, a in out.items()}


def range_assignment(subscriptions: dict[str, set[str]], partitions: dict[str, int],
                     previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, contiguous ranges of partitions to its subscribers in member-id order (so members
    subscribed to co-partitioned topics get the same partition numbers of each)."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    for t, n in sorted(partitions.items()):
        subscribers = sorted(m for m, topics in subscriptions.items() if t in topics)
        if not subscribers:
            continue
        share, extra = divmod(n, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            if size:
                out[m][t] = set(range(start, start + size))
            start += size
    return {m: _normalize(a) for m, a in out.items()}


ASSIGNOR_FUNCTIONS = {"uniform": uniform_assignment, "range": range_assignment}


class ConsumerGroupCoordinator:
    def __init__(self, registry: TopicRegistry, settings: ConsumerGroupSettings | None = None,
                 configs_path: str | None = None) -> None:
        self.registry = registry
        # the topics members subscribe to and are assigned: this broker's own (one node), the cluster's metadata in
        # a cluster (set by its membership: a topic this broker holds no replica of is assigned too)
        self.topics: GroupTopics = RegistryTopics(registry)
        self.settings = settings or ConsumerGroupSettings()
        self.groups: dict[str, ConsumerGroup] = {}
        # group id -> its own consumer.* configs (GROUP resource): one node, kept in ``configs_path`` (JSON); a
        # cluster's come from its metadata (take_configs)
        self.configs_path = configs_path
        self.configs: dict[str, dict[str, str]] = {}
        if configs_path is not None and os.path.exists(configs_path):
            with open(configs_path) as f:
                self.configs = json.load(f)
        self._reaper = Reaper(self.expire, "consumer-group-sessions")
        # called with the id of a group that may have changed (a heartbeat, a leave, an expiry, a deletion): a
        # cluster's coordinator stores what changed (consumer_records.ConsumerGroupStore) for the next one; returns
        # the last offset written (a heartbeat's answer waits until the ISR has it), None if nothing was
        self.on_change: Callable[[str], int | None] | None = None

    def start(self) -> None:
        self._reaper.start()

    async def stop(self) -> None:
        await self._reaper.stop()

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    # -- group configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms) -------------

    def setting(self, group_id: str, name: str) -> int:
        """``session_timeout_ms`` / ``heartbeat_interval_ms`` for ``group_id``: its own config, else the broker's."""
        for key, attr in CONSUMER_GROUP_CONFIGS.items():
            if attr == name and key in self.configs.get(group_id, {}):
                return int(self.configs[group_id][key])
        return getattr(self.settings, name)

    def bounds(self, name: str) -> tuple[int, int]:
        """Kafka's group.consumer.min/max.* bounds of a group config (taking in the broker's own default)."""
        s = self.settings
        if name == "consumer.session.timeout.ms":
            return (min(s.min_session_timeout_ms, s.session_timeout_ms),
                    max(s.max_session_timeout_ms, s.session_timeout_ms))
        return (min(s.min_heartbeat_interval_ms, s.heartbeat_interval_ms),
                max(s.max_heartbeat_interval_ms, s.heartbeat_interval_ms))

    def validate_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        """Kafka's GroupConfig.validate: integers within the broker's bounds, the heartbeat interval below the
        session timeout (as the group would have them after ``changes``). ConsumerGroupError(INVALID_CONFIG)."""
        after = {**self.configs.get(group_id, {}), **changes}
        values = {}
        for name, attr in CONSUMER_GROUP_CONFIGS.items():
            value = after.get(name)
            if value is None:
                values[name] = getattr(self.settings, attr)
                continue
            try:
                values[name] = int(value)
            except ValueError:
                raise ConsumerGroupError(ErrorCode.invalid_config, f"{name}={value!r} is not an integer") from None
            low, high = self.bounds(name)
            if name in changes and not low <= values[name] <= high:
                raise ConsumerGroupError(ErrorCode.invalid_config,
                                         f"{name}={value} is out of range: it must be between {low} and {high} "
                                         "(group.consumer.min/max.* of the broker)")
        if values["consumer.heartbeat.interval.ms"] >= values["consumer.session.timeout.ms"]:
            raise ConsumerGroupError(ErrorCode.invalid_config,
                                     "consumer.heartbeat.interval.ms must be less than consumer.session.timeout.ms")

    def alter_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        """One node: set (None: remove) a group's consumer.* configs, validated first (``validate_configs``)."""
        configs = {k: v for k, v in self.configs.get(group_id, {}).items() if k not in changes}
        configs.update({k: v for k, v in changes.items() if v is not None})
        if configs:
            self.configs[group_id] = configs
        else:
            self.configs.pop(group_id, None)
        if self.configs_path is not None:
            write_json_atomically(self.configs_path, self.configs)
        self._reaper.due(time.monotonic())  # a shorter session timeout applies to the members there now

    def take_configs(self, configs: dict[str, dict[str, str]]) -> None:
        """Cluster mode: the groups' configs as the cluster metadata holds them (their consumer.* ones)."""
        self.configs = {gid: own for gid, values in configs.items()
                        if (own := {k: v for k, v in values.items() if k in CONSUMER_GROUP_CONFIGS})}
        self._reaper.due(time.monotonic())

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, subscribed_names: tuple[str, ...] | None,
                  subscribed_regex: str | None, server_assignor: str | None, owned: Assignment | None,
                  client_id: str, client_host: str, version: int) -> dict:
        """One heartbeat; returns the member id, its epoch and (when the member must learn it) its assignment.
        Raises ConsumerGroupError with Kafka's error code, the group left as it was."""
        self._validate(group_id, member_id, member_epoch, instance_id, rebalance_timeout_ms, subscribed_names,
                       subscribed_regex, server_assignor, owned, version)
        group = self.groups.get(group_id)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            body = self._leave(group, group_id, member_id, member_epoch, instance_id)
            body["written"] = self._changed(group_id)
            return body
        now = time.monotonic()
        if member_epoch == JOIN_EPOCH:
            if not member_id:
                member_id = str(uuid.uuid4())  # v0: the broker names the member
            group, member, joined = self._join(group, group_id, member_id, instance_id, rack_id,
                                               rebalance_timeout_ms, client_id, client_host)
        else:
            joined = False
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                raise ConsumerGroupError(ErrorCode.unknown_member_id, f"{member_id} is not a member of {group_id}")
            if member_epoch != member.epoch and not (
                    member_epoch == member.previous_epoch and owned is not None
                    and all(ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items())):
                raise ConsumerGroupError(ErrorCode.fenced_member_epoch,
                                         f"epoch {member_epoch} is not the member's epoch {member.epoch}")
        member.last_seen = now
        if rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        changed = False
        if subscribed_names is not None and tuple(subscribed_names) != member.subscribed_names:
            member.subscribed_names, changed = tuple(subscribed_names), True
        if subscribed_regex is not None and (subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex, changed = subscribed_regex or None, True
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor, changed = server_assignor, True
        if changed:
            group.subscriptions = None
        if self._refresh_topics(group) or changed or joined:
            group.epoch += 1  # once per heartbeat, whatever moved (a static member back is no new member)
        if group.epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, owned, now)
        group.touch(member_id)  # whatever this heartbeat changed of it (subscription, epoch, partitions)
        self._reaper.due(self._deadline(member, group_id))  # a new member's, or a revocation's
        body = {"member_id": member_id, "member_epoch": member.epoch, "assignment": None,
                "heartbeat_interval_ms": self.setting(group_id, "heartbeat_interval_ms")}
        if member_epoch == JOIN_EPOCH or member.assigned != member.sent or (
                owned is not None and owned != member.assigned):
            member.sent = dict(member.assigned)
            body["assignment"] = member.assigned
        body["written"] = self._changed(group_id)
        return body

    def _changed(self, group_id: str) -> int | None:
        """``on_change``'s answer: the last offset it wrote (to be durable before the member is answered), or
        None (nothing written)."""
        if self.on_change is None:
            if (group := self.groups.get(group_id)) is not None:
                group.touched.clear()  # no store to tell
        else:
            try:
                return self.on_change(group_id)
            except Exception:  # the group goes on in memory; the next coordinator would make its members rejoin
                log.exception("consumer group %s: its state was not stored", group_id)
        return None

    def taken_over(self) -> None:
        """Groups restored by a new coordinator (consumer_records.restore): the reaper looks at their deadlines."""
        deadlines = [self._deadline(m, g.group_id) for g in self.groups.values() for m in g.members.values()]
        if deadlines:
            self._reaper.due(min(deadlines))

    def _validate(self, group_id, member_id, member_epoch, instance_id, rebalance_timeout_ms, subscribed_names,
                  subscribed_regex, server_assignor, owned, version) -> None:
        def invalid(message: str) -> ConsumerGroupError:
            return ConsumerGroupError(ErrorCode.invalid_request, message)

        if not group_id:
            raise ConsumerGroupError(ErrorCode.invalid_group_id, "GroupId can't be empty.")
        if instance_id is not None and not instance_id:
            raise invalid("InstanceId can't be empty.")
        if member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if not member_id and (version >= 1 or member_epoch != JOIN_EPOCH):
            raise invalid("MemberId can't be empty.")
        if member_epoch == STATIC_LEAVE_EPOCH and instance_id is None:
            raise invalid("InstanceId can't be null when leaving the group as a static member.")
        if member_epoch == JOIN_EPOCH:
            if rebalance_timeout_ms < 0:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not subscribed_names and not subscribed_regex:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if subscribed_regex:
            try:
                re.compile(subscribed_regex)
            except re.error as exc:
                raise ConsumerGroupError(ErrorCode.invalid_regular_expression,
                                         f"SubscribedTopicRegex {subscribed_regex!r} is not valid: {exc}") from None
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            raise ConsumerGroupError(ErrorCode.unsupported_assignor,
                                     f"ServerAssignor {server_assignor!r} is not supported: {', '.join(ASSIGNORS)}")

    def _join(self, group, group_id, member_id, instance_id, rack_id, rebalance_timeout_ms, client_id,
              client_host) -> tuple[ConsumerGroup, ConsumerMember, bool]:
        """The member of a join (epoch 0), and whether it is a new one (False: a static member back, which takes
        the place of its old member id)."""
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, assignor=self.settings.default_assignor)
        fresh = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, rebalance_timeout_ms)
        previous = group.member_by_instance(instance_id) if instance_id is not None else None
        if previous is not None and previous.member_id != member_id:
            if previous.epoch != STATIC_LEAVE_EPOCH:
                raise ConsumerGroupError(ErrorCode.unreleased_instance_id,
                                         f"static member {instance_id} is still in the group as "
                                         f"{previous.member_id}")
            # the static member is back (Kafka's static member replacement): under its new member id it takes over
            # the old one's current assignment and state at epoch 0, and the heartbeat reconciles it against the
            # current target as any member (what it was revoking is done: it owns nothing; what the target moved
            # while it was away is taken from it or waits for its new owner)
            group.forget(previous.member_id)
            fresh.subscribed_names, fresh.subscribed_regex = previous.subscribed_names, previous.subscribed_regex
            fresh.server_assignor = previous.server_assignor
            fresh.epoch, fresh.previous_epoch = JOIN_EPOCH, JOIN_EPOCH
            fresh.state, fresh.revocation_deadline = previous.state, previous.revocation_deadline
            fresh.assigned, fresh.pending_revocation = previous.assigned, previous.pending_revocation
            if previous.member_id in group.target:
                group.target[member_id] = group.target.pop(previous.member_id)
            group.admit(fresh)
            return group, fresh, False
        if member_id not in group.members and len(group.members) >= self.settings.max_size:
            raise ConsumerGroupError(ErrorCode.group_max_size_reached,
                                     f"group {group_id} has reached its {self.settings.max_size} members")
        # a new member, or one that rejoins from scratch: what it owned is released (the group epoch moves
        # once its subscription is taken in)
        group.admit(fresh)
        return group, fresh, True

    def _leave(self, group, group_id, member_id, member_epoch, instance_id) -> dict:
        member = group.members.get(member_id) if group is not None else None
        if member is None and group is not None and instance_id is not None:
            member = group.member_by_instance(instance_id)
        if group is None or member is None:
            raise ConsumerGroupError(ErrorCode.unknown_member_id, f"{member_id} is not a member of {group_id}")
        if member_epoch == STATIC_LEAVE_EPOCH:
            # it keeps its partitions until it returns or its session ends; those it was revoking are released now
            # (it consumes nothing while away: Kafka's static leave), and it owes no revocation to be fenced for
            member.epoch = STATIC_LEAVE_EPOCH
            member.pending_revocation = {}
            member.state = MEMBER_STABLE if member.state == UNREVOKED else member.state
            group.touch(member.member_id)
        else:
            self._remove(group, member.member_id, "left the group")
        return {"member_id": member_id, "member_epoch": member_epoch, "assignment": None,
                "heartbeat_interval_ms": 0}

    def _remove(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        log.info("consumer group %s: member %s %s", group.group_id, member_id, why)
        group.forget(member_id)
        group.target.pop(member_id, None)
        group.epoch += 1

    # -- the target assignment ------------------------------------------------------------

    def subscribed_topics(self, member: ConsumerMember) -> set[str]:
        return self._subscription_topics(member.subscribed_names, member.subscribed_regex)

    def _subscription_topics(self, names: tuple[str, ...], regex: str | None) -> set[str]:
        topics = {t for t in names if self._subscribable(t)}
        if regex:
            pattern = re.compile(regex)
            topics |= {t for t in self.topics.names() if self._subscribable(t) and pattern.fullmatch(t)}
        return topics

    def _group_subscriptions(self, group: ConsumerGroup) -> dict[tuple[tuple[str, ...], str | None], set[str]]:
        """Each distinct subscription of the group's members -> the topics it subscribes to now."""
        return {sub: self._subscription_topics(*sub) for sub in group.distinct_subscriptions()}

    def _subscribed(self, group: ConsumerGroup) -> set[str]:
        """Every topic some member of the group subscribes to now."""
        return set().union(*self._group_subscriptions(group).values())

    def _subscribable(self, name: str) -> bool:
        topic = self.topics.get(name)
        return topic is not None and not topic.internal

    def _refresh_topics(self, group: ConsumerGroup) -> bool:
        """Has a subscribed topic been created, deleted or given partitions? That moves the group epoch, as a
        new member does."""
        names = self._subscribed(group)
        found = {t: self.topics.get(t) for t in names}
        seen = tuple(sorted((t, topic.partitions) for t, topic in found.items() if topic is not None))
        if seen == group.topics_seen:
            return False
        group.topics_seen = seen
        return True

    def _compute_target(self, group: ConsumerGroup) -> None:
        topics = self._group_subscriptions(group)
        subscriptions = {m.member_id: topics[(m.subscribed_names, m.subscribed_regex)] for m in group.members.values()}
        partitions = {t: n for t, n in group.topics_seen}
        # the members' choice when they agree on one (Kafka: the most requested), else the broker's default
        chosen = [m.server_assignor for m in group.members.values() if m.server_assignor]
        group.assignor = max(sorted(set(chosen)), key=chosen.count) if chosen else self.settings.default_assignor
        group.target = ASSIGNOR_FUNCTIONS[group.assignor](subscriptions, partitions, group.target)
        group.assignment_epoch = group.epoch
        group.touched.update(dict.fromkeys(group.members))  # every member's target may have moved

    # -- bringing a member to its target ----------------------------------------------------

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None, now: float) -> None:
        if member.state == UNREVOKED:
            still_owned = owned is None or any(owned.get(t, frozenset()) & ps
                                               for t, ps in member.pending_revocation.items())
            if still_owned:
                return  # it has not given them up yet
            member.pending_revocation = {}
        elif member.state == MEMBER_STABLE and member.epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, {})
        others: dict[tuple[str, int], str] = {}
        for other in group.members.values():
            if other is not member:
                for t, ps in other.owns().items():
                    for p in ps:
                        others[(t, p)] = other.member_id
        keep: dict[str, set[int]] = {}
        revoke: dict[str, set[int]] = {}
        add: dict[str, set[int]] = {}
        unreleased = False
        for t in set(target) | set(member.assigned):
            current, wanted = member.assigned.get(t, frozenset()), target.get(t, frozenset())
            keep[t] = set(current & wanted)
            revoke[t] = set(current - wanted)
            add[t] = {p for p in wanted - current if (t, p) not in others}
            unreleased = unreleased or bool(wanted - current - add[t])
        if any(revoke.values()) and (owned is None or any(owned.get(t, frozenset()) & ps for t, ps in revoke.items())):
            # it must give these up first (Kafka: only if it says it owns some of them; one that joins owns none)
            member.state = UNREVOKED
            member.assigned = _normalize(keep)
            member.pending_revocation = _normalize(revoke)
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
            return
        member.assigned = _normalize({t: keep[t] | add[t] for t in keep})
        member.state = UNRELEASED if unreleased else MEMBER_STABLE
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch

    # -- offsets ---------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """May a member of this consumer group commit? Raises ConsumerGroupError with Kafka's answer if not."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            # as Kafka: an admin client's or a consumer's that is not a member (a client-made member id and epoch -1)
            return
        member = group.members.get(member_id)
        if member is None:
            raise ConsumerGroupError(ErrorCode.unknown_member_id, f"{member_id} is not a member of {group_id}")
        if member_epoch != member.epoch:
            raise ConsumerGroupError(ErrorCode.stale_member_epoch,
                                     f"epoch {member_epoch} is not the member's epoch {member.epoch}")

    def delete(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            raise ConsumerGroupError(ErrorCode.group_id_not_found)
        if group.members:
            raise ConsumerGroupError(ErrorCode.non_empty_group)
        del self.groups[group_id]
        self._changed(group_id)  # its stored records go (tombstones)

    def subscribed_by_group(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return self._subscribed(group)

    # -- timeouts --------------------------------------------------------------------------

    def _deadline(self, member: ConsumerMember, group_id: str) -> float:
        """When ``member`` leaves unless it heartbeats (or, revoking, revokes) first (its group's session timeout)."""
        deadline = member.last_seen + self.setting(group_id, "session_timeout_ms") / 1000
        return min(deadline, member.revocation_deadline) if member.state == UNREVOKED else deadline

    def expire(self, now: float | None = None) -> float | None:
        """Members past their session or revocation deadline leave; the nearest deadline left (None: none)."""
        now = time.monotonic() if now is None else now
        nearest = None
        for group in list(self.groups.values()):
            session_s = self.setting(group.group_id, "session_timeout_ms") / 1000
            before = len(group.members)
            for member in list(group.members.values()):
                if now - member.last_seen > session_s:
                    self._remove(group, member.member_id, "timed out (no heartbeat)")
                elif member.state == UNREVOKED and now > member.revocation_deadline:
                    self._remove(group, member.member_id, "was fenced: it did not revoke within its rebalance timeout")
                else:
                    deadline = self._deadline(member, group.group_id)
                    nearest = deadline if nearest is None else min(nearest, deadline)
            if len(group.members) != before:
                self._changed(group.group_id)
        return nearest

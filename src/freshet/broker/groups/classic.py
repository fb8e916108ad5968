"""The group coordinator: Kafka's classic consumer-group protocol.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable and back. JoinGroup
parks each member until every known member has rejoined (or the rebalance timeout drops the
ones that did not), then answers all of them at once with a new generation; the leader also
receives every member's subscription and computes the assignment on the client side (range,
roundrobin, cooperative-sticky: the broker does not care which). SyncGroup hands the leader's
assignment to each member. Heartbeats keep members alive; a member silent for its session
timeout is removed and the others rebalance.

A new group waits ``initial_rebalance_delay_ms`` (100 ms by default, not Kafka's 3 s) so that
members starting together land in one generation, and its first member consumes well within a
second.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from kio.schema.errors import ErrorCode

from .reaper import Reaper

log = logging.getLogger(__name__)

WAITING_JOIN_RECHECK_S = 1.0  # how often a member waiting in a join is looked at (not expired while it waits)
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def subscribed_topics(self) -> set[str]:
        """Topics in a consumer-protocol subscription (version int16, then an array of strings)."""
        if self.protocol_type != "consumer" or not self.protocols:
            return set()
        data = self.protocols[0][1]
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            pos, topics = 6, set()
            for _ in range(count):
                (n,) = struct.unpack_from(">h", data, pos)
                topics.add(data[pos + 2 : pos + 2 + n].decode())
                pos += 2 + n
            return topics
        except (struct.error, UnicodeDecodeError):
            return set()


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending: dict[str, float] = field(default_factory=dict)  # member ids handed out, not yet joined
    rebalance_timer: asyncio.TimerHandle | None = None
    rebalance_deadline: float = 0.0
    new_group: bool = True

    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000


class GroupError(Exception):
    def __init__(self, error_code: int, message: str = ""):
        super().__init__(message or str(error_code))
        self.error_code = error_code


class GroupCoordinator:
    def __init__(self, initial_rebalance_delay_ms: int = 100, min_session_timeout_ms: int = 1000,
                 max_session_timeout_ms: int = 1_800_000) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.min_session_ms = min_session_timeout_ms
        self.max_session_ms = max_session_timeout_ms
        self._reaper = Reaper(self.expire, "group-sessions")
        # called with a group whose generation is complete (Stable) or whose last member left (Empty): a cluster's
        # coordinator stores its membership (group_metadata.store) so that the next coordinator takes it over
        self.on_change: Callable[[Group], None] | None = None

    def start(self) -> None:
        self._reaper.start()

    async def stop(self) -> None:
        await self._reaper.stop()

    def group(self, group_id: str, create: bool = False) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
        return g

    # -- JoinGroup ------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> dict:
        if not group_id:
            raise GroupError(ErrorCode.invalid_group_id, "group id must not be empty")
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise GroupError(ErrorCode.invalid_session_timeout)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if not protocols:
            raise GroupError(ErrorCode.inconsistent_group_protocol, "no protocols")
        g = self.group(group_id, create=True)
        assert g is not None
        if g.state == DEAD:
            raise GroupError(ErrorCode.coordinator_not_available)
        if g.members and (protocol_type != g.protocol_type or not self._common_protocols(g, protocols)):
            raise GroupError(ErrorCode.inconsistent_group_protocol)

        if member_id == "":
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is not None:
                old = g.static_members.get(group_instance_id)
                if old is not None and old in g.members:
                    self._fence(g, old)  # the same static member restarted: it takes over its slot
            elif require_known_member_id:
                g.pending[member_id] = time.monotonic() + session_timeout_ms / 1000
                self._reaper.due(g.pending[member_id])
                return self._join_response(ErrorCode.member_id_required, g, member_id)
        else:
            if group_instance_id is not None and g.static_members.get(group_instance_id, member_id) != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
            if member_id not in g.members and member_id not in g.pending:
                raise GroupError(ErrorCode.unknown_member_id)
        g.pending.pop(member_id, None)

        member = g.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            g.members[member_id] = member
            if group_instance_id is not None:
                g.static_members[group_instance_id] = member_id
        else:
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_heartbeat = time.monotonic()
        # its session from now (a new member, or a shorter timeout), should its join be given up
        self._reaper.due(member.last_heartbeat + session_timeout_ms / 1000)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(self._join_response(ErrorCode.unknown_member_id, g, member_id))
        member.join_future = asyncio.get_running_loop().create_future()
        g.protocol_type = protocol_type
        if g.state != PREPARING:
            self._prepare_rebalance(g, f"member {member_id} joined")
        self._maybe_complete_join(g)
        return await member.join_future

    def _common_protocols(self, g: Group, protocols: list[tuple[str, bytes]]) -> set[str]:
        names = {name for name, _ in protocols}
        for m in g.members.values():
            names &= {name for name, _ in m.protocols}
        return names

    def _join_response(self, error_code: int, g: Group, member_id: str, members: list | None = None) -> dict:
        return {"throttle_time": 0, "error_code": error_code, "generation_id": g.generation if not error_code else -1,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name if not error_code else None,
                "leader": g.leader or "" if not error_code else "", "skip_assignment": False,
                "member_id": member_id, "members": members or []}

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == COMPLETING:
            for m in g.members.values():
                if m.sync_future and not m.sync_future.done():
                    m.sync_future.set_result(self._sync_response(ErrorCode.rebalance_in_progress, g, b""))
        log.info("group %s: rebalancing (%s)", g.group_id, reason)
        g.state = PREPARING
        delay = self.initial_delay_s if g.new_group else g.rebalance_timeout_s()
        g.rebalance_deadline = time.monotonic() + delay
        if g.rebalance_timer:
            g.rebalance_timer.cancel()
        loop = asyncio.get_running_loop()
        g.rebalance_timer = loop.call_later(delay, self._rebalance_deadline, g)

    def _rebalance_deadline(self, g: Group) -> None:
        g.rebalance_timer = None
        if g.state != PREPARING:
            return
        if g.new_group:
            g.new_group = False
            self._maybe_complete_join(g)
            if g.state == PREPARING:  # someone is still missing: give them the rebalance timeout
                g.rebalance_timer = asyncio.get_running_loop().call_later(
                    g.rebalance_timeout_s(), self._rebalance_deadline, g)
            return
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING or g.new_group:
            return
        if all(m.join_future is not None and not m.join_future.done() for m in g.members.values()):
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.rebalance_timer:
            g.rebalance_timer.cancel()
            g.rebalance_timer = None
        for member_id in [mid for mid, m in g.members.items() if not (m.join_future and not m.join_future.done())]:
            log.info("group %s: member %s did not rejoin in time; removed", g.group_id, member_id)
            self._remove(g, member_id)
        g.generation += 1
        g.new_group = False
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            return
        g.protocol_name = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        now = time.monotonic()
        for m in g.members.values():
            m.last_heartbeat = now
            members = None
            if m.member_id == g.leader:
                members = [{"member_id": x.member_id, "group_instance_id": x.group_instance_id,
                            "metadata": x.metadata_for(g.protocol_name)} for x in g.members.values()]
            assert m.join_future is not None
            m.join_future.set_result(self._join_response(ErrorCode.none, g, m.member_id, members))
        log.info("group %s: generation %d with %d members, leader %s, protocol %s", g.group_id, g.generation,
                 len(g.members), g.leader, g.protocol_name)

    def _select_protocol(self, g: Group) -> str:
        common = None
        for m in g.members.values():
            names = [name for name, _ in m.protocols]
            common = names if common is None else [n for n in common if n in names]
        candidates = common or []
        votes: dict[str, int] = {}
        for m in g.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(candidates, key=lambda n: (votes.get(n, 0), -candidates.index(n)))

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == member_id:
            del g.static_members[m.group_instance_id]
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _fence(self, g: Group, member_id: str) -> None:
        m = g.members.get(member_id)
        if m is None:
            return
        if m.join_future and not m.join_future.done():
            m.join_future.set_result(self._join_response(ErrorCode.fenced_instance_id, g, member_id))
        if m.sync_future and not m.sync_future.done():
            m.sync_future.set_result(self._sync_response(ErrorCode.fenced_instance_id, g, b""))
        m.join_future = m.sync_future = None
        self._remove(g, member_id)

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    def _check_member(self, g: Group | None, member_id: str, group_instance_id: str | None,
                      generation: int | None) -> Member:
        if g is None or member_id not in g.members:
            raise GroupError(ErrorCode.unknown_member_id)
        if group_instance_id is not None and g.static_members.get(group_instance_id) != member_id:
            raise GroupError(ErrorCode.fenced_instance_id)
        if generation is not None and generation != g.generation:
            raise GroupError(ErrorCode.illegal_generation)
        return g.members[member_id]

    def _sync_response(self, error_code: int, g: Group, assignment: bytes) -> dict:
        return {"throttle_time": 0, "error_code": error_code, "protocol_type": g.protocol_type,
                "protocol_name": g.protocol_name, "assignment": assignment}

    async def sync(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                   assignments: dict[str, bytes]) -> dict:
        g = self.group(group_id)
        member = self._check_member(g, member_id, group_instance_id, generation)
        assert g is not None
        member.last_heartbeat = time.monotonic()
        if g.state == PREPARING:
            raise GroupError(ErrorCode.rebalance_in_progress)
        if g.state == STABLE:
            return self._sync_response(ErrorCode.none, g, member.assignment)
        member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            g.state = STABLE
            self._changed(g)
            for m in g.members.values():
                if m.sync_future and not m.sync_future.done():
                    m.sync_future.set_result(self._sync_response(ErrorCode.none, g, m.assignment))
        result = await member.sync_future
        if result is None:
            raise GroupError(ErrorCode.unknown_member_id)
        return result

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        g = self.group(group_id)
        try:
            member = self._check_member(g, member_id, group_instance_id, None)
        except GroupError as exc:
            return exc.error_code
        assert g is not None
        member.last_heartbeat = time.monotonic()
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[tuple[str, str | None, int]]:
        g = self.group(group_id)
        results = []
        for member_id, instance_id in members:
            if g is not None and not member_id and instance_id is not None:
                member_id = g.static_members.get(instance_id, "")
            if g is not None and member_id in g.pending:
                # a member id handed out (MEMBER_ID_REQUIRED) whose JoinGroup has not come: it leaves before
                # joining, and a JoinGroup still on its way is then refused (UNKNOWN_MEMBER_ID), as Kafka does;
                # taken in, it would hold the next rebalance until its session expired
                del g.pending[member_id]
                log.info("group %s: pending member %s left before joining", group_id, member_id)
                results.append((member_id, instance_id, ErrorCode.none))
                continue
            if g is None or member_id not in g.members:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            if instance_id is not None and g.static_members.get(instance_id) != member_id:
                results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                continue
            log.info("group %s: member %s left", group_id, member_id)
            self._remove(g, member_id)
            results.append((member_id, instance_id, ErrorCode.none))
            self._after_departure(g, f"member {member_id} left")
        return results

    def _after_departure(self, g: Group, reason: str) -> None:
        if g.members:
            if g.state == PREPARING:
                self._maybe_complete_join(g)
            else:
                self._prepare_rebalance(g, reason)
        elif g.state != EMPTY:
            if g.rebalance_timer:
                g.rebalance_timer.cancel()
                g.rebalance_timer = None
            g.generation += 1
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            self._changed(g)

    def _changed(self, g: Group) -> None:
        if self.on_change is not None:
            try:
                self.on_change(g)
            except Exception:  # the group goes on in memory; the next coordinator would make it rejoin
                log.exception("group %s: its membership was not stored", g.group_id)

    def taken_over(self, deadlines: list[float]) -> None:
        """Groups restored by a new coordinator (group_metadata.restore): their members' sessions end then."""
        if deadlines:
            self._reaper.due(min(deadlines))

    def expire(self, now: float) -> float | None:
        """Members silent past their session timeout leave, member ids handed out and not used go; the nearest
        deadline left (the reaper's next check). A member waiting in a join does not expire: it is answered (its
        session then counts from the answer) or dropped by the rebalance timeout."""
        nearest = None
        for g in list(self.groups.values()):
            for member_id, deadline in list(g.pending.items()):
                if deadline < now:
                    del g.pending[member_id]
                elif nearest is None or deadline < nearest:
                    nearest = deadline
            for m in list(g.members.values()):
                deadline = m.last_heartbeat + m.session_timeout_ms / 1000
                if m.join_future is not None and not m.join_future.done():
                    # not expired while its join waits; looked at again in case the join is given up (the
                    # client gone: the future cancelled) and its session runs out from its join
                    deadline = max(deadline, now + WAITING_JOIN_RECHECK_S)
                elif now > deadline:
                    if g.members.get(m.member_id) is m:
                        log.info("group %s: member %s session expired", g.group_id, m.member_id)
                        self._remove(g, m.member_id)
                        self._after_departure(g, f"member {m.member_id} session expired")
                    continue
                if nearest is None or deadline < nearest:
                    nearest = deadline
        return nearest

    # -- views ----------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> None:
        """May this commit go ahead? Raises GroupError with Kafka's answer if not."""
        g = self.group(group_id)
        if generation < 0 and (g is None or not g.members):
            return  # as Kafka: an admin client's or a consumer's outside group management, to an empty group
        if generation < 0 and not member_id and group_instance_id is None:
            raise GroupError(ErrorCode.unknown_member_id, "the group has active members")
        member = self._check_member(g, member_id, group_instance_id, generation)
        assert g is not None
        if g.state == COMPLETING:  # as Kafka: a member of the current generation commits while the group
            raise GroupError(ErrorCode.rebalance_in_progress)  # prepares a rebalance (its revoked partitions)
        member.last_heartbeat = time.monotonic()

    def delete(self, group_id: str) -> None:
        g = self.groups.get(group_id)
        if g is not None and g.members:
            # members whose sessions ended are gone now, not when the reaper's task next runs (librdkafka's 0081
            # deletes its static members' groups right after their session timeout, and lost by milliseconds)
            self.expire(time.monotonic())
        if g is not None and g.members:
            raise GroupError(ErrorCode.non_empty_group)
        self.groups.pop(group_id, None)
        self._changed(Group(group_id, state=DEAD))  # its stored membership goes too (a tombstone)

"""The group coordinator in-process: joins, the leader's assignment, heartbeats, leaving, commits."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.groups.classic import EMPTY, STABLE, GroupCoordinator, GroupError

PROTOCOLS = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]


def join(coordinator, group, member_id="", instance=None, require_known=True):
    return coordinator.join(group, member_id, instance, "client", "/127.0.0.1", 6000, 6000, "consumer", PROTOCOLS,
                            require_known)


def test_two_members_join_one_leads_and_its_assignment_reaches_both():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        first = await join(c, "g")
        assert first["error_code"] == ErrorCode.member_id_required  # KIP-394: come back with this id
        a, b = await asyncio.gather(join(c, "g", first["member_id"]), join(c, "g", require_known=False))
        assert a["generation_id"] == b["generation_id"] == 1
        leader = a if a["leader"] == a["member_id"] else b
        follower = b if leader is a else a
        assert {m["member_id"] for m in leader["members"]} == {a["member_id"], b["member_id"]}
        assert follower["members"] == []  # only the leader is told who the members are
        plan = {a["member_id"]: b"for-a", b["member_id"]: b"for-b"}
        synced = await asyncio.gather(c.sync("g", follower["member_id"], None, 1, {}),
                                      c.sync("g", leader["member_id"], None, 1, plan))
        assert sorted(s["assignment"] for s in synced) == [b"for-a", b"for-b"]
        assert c.group("g").state == STABLE
        assert c.heartbeat("g", a["member_id"], None, 1) == ErrorCode.none
        assert c.heartbeat("g", a["member_id"], None, 0) == ErrorCode.illegal_generation
        assert c.heartbeat("g", "stranger", None, 1) == ErrorCode.unknown_member_id
        c.check_commit("g", a["member_id"], None, 1)  # a member of this generation may commit
        with pytest.raises(GroupError) as stale:
            c.check_commit("g", a["member_id"], None, 0)
        assert stale.value.error_code == ErrorCode.illegal_generation

    asyncio.run(scenario())


def test_bad_joins_are_refused_and_change_nothing():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        for group, session_ms, code in (("", 6000, ErrorCode.invalid_group_id),
                                        ("g", 10, ErrorCode.invalid_session_timeout)):
            with pytest.raises(GroupError) as refused:
                await c.join(group, "", None, "c", "/h", session_ms, 6000, "consumer", PROTOCOLS, True)
            assert refused.value.error_code == code
        with pytest.raises(GroupError) as unknown:
            await join(c, "g", "never-issued")
        assert unknown.value.error_code == ErrorCode.unknown_member_id
        assert c.group("g") is None or not c.group("g").members

    asyncio.run(scenario())


def test_the_last_member_leaving_empties_the_group():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        only = await join(c, "g", require_known=False)
        await c.sync("g", only["member_id"], None, 1, {only["member_id"]: b"all"})
        results = c.leave("g", [(only["member_id"], None), ("stranger", None)])
        assert [code for _, _, code in results] == [ErrorCode.none, ErrorCode.unknown_member_id]
        assert c.group("g").state == EMPTY and not c.group("g").members

    asyncio.run(scenario())


def test_a_member_leaving_between_its_two_joins_does_not_hold_the_next_rebalance():
    """librdkafka closed right after MEMBER_ID_REQUIRED sends LeaveGroup, and may still send the JoinGroup with
    the id it was given: as in Kafka the pending id leaves (NONE) and the late JoinGroup is refused, so the
    next consumer's rebalance does not wait for a member that is gone."""
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        first = await join(c, "g")
        assert first["error_code"] == ErrorCode.member_id_required
        assert [code for _, _, code in c.leave("g", [(first["member_id"], None)])] == [ErrorCode.none]
        with pytest.raises(GroupError) as late:
            await join(c, "g", first["member_id"])
        assert late.value.error_code == ErrorCode.unknown_member_id
        assert not c.group("g").members
        second = await asyncio.wait_for(join(c, "g", require_known=False), 5)
        assert second["error_code"] == ErrorCode.none and second["generation_id"] == 1

    asyncio.run(scenario())


def test_a_member_may_commit_while_the_group_prepares_a_rebalance_but_not_while_it_completes_one():
    """As Kafka's ClassicGroup.validateOffsetCommit: a member of the current generation commits during
    PreparingRebalance (its revoked partitions' offsets, before it rejoins: librdkafka's test 0113 does), and
    gets REBALANCE_IN_PROGRESS only in CompletingRebalance, when a new generation's assignment is not yet out."""
    from freshet.broker.groups.classic import COMPLETING, PREPARING

    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        first = await join(c, "g")
        a = await join(c, "g", first["member_id"])
        await c.sync("g", a["member_id"], None, 1, {a["member_id"]: b"all"})
        newcomer = asyncio.ensure_future(join(c, "g", require_known=False))
        while c.group("g").state != PREPARING:
            await asyncio.sleep(0)
        c.check_commit("g", a["member_id"], None, 1)  # the generation it has: accepted
        rejoined, joined = await asyncio.gather(join(c, "g", a["member_id"]), newcomer)
        assert c.group("g").state == COMPLETING and rejoined["generation_id"] == 2
        with pytest.raises(GroupError) as completing:
            c.check_commit("g", a["member_id"], None, 2)
        assert completing.value.error_code == ErrorCode.rebalance_in_progress

    asyncio.run(scenario())


def test_deleting_a_group_whose_members_sessions_ended_deletes_it_before_the_reaper_runs():
    """A DeleteGroups that comes after the last member's session timeout finds the group empty, whether or not the
    sessions' task has run since (librdkafka's 0081 deletes right after its static members' timeout); one whose
    member is still within its session is refused NON_EMPTY_GROUP and keeps it."""
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        for group in ("ended", "alive"):
            first = await join(c, group, instance=f"{group}-instance", require_known=False)
            assert first["error_code"] == ErrorCode.none
        with pytest.raises(GroupError) as refused:
            c.delete("alive")
        assert refused.value.error_code == ErrorCode.non_empty_group and c.group("alive").members
        (member,) = c.group("ended").members.values()
        member.last_heartbeat -= member.session_timeout_ms / 1000 + 0.5  # its session ended half a second ago
        c.delete("ended")
        assert c.group("ended") is None and c.group("alive").members  # the live one kept

    asyncio.run(scenario())

"""Deadline-driven session checks: a coordinator acts when a deadline comes, and an idle one is not woken."""

import asyncio
import contextlib
import time

from freshet.broker.config import ConsumerGroupSettings, ShareSettings
from freshet.broker.groups.classic import GroupCoordinator
from freshet.broker.groups.consumer import ConsumerGroupCoordinator
from freshet.broker.groups.reaper import Reaper
from freshet.broker.groups.share import ShareGroupCoordinator, ShareMember
from freshet.broker.topics.registry import TopicRegistry

from .test_groups import PROTOCOLS

DEADLINE_S = 30  # generous: the machine is shared


async def _until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _running(coordinator):
    coordinator.start()
    try:
        yield coordinator
    finally:
        await coordinator.stop()


def test_a_reaper_with_nothing_to_watch_waits_until_told_of_a_deadline():
    async def scenario():
        calls, deadlines = [], []

        def check(now):
            calls.append(now)
            return deadlines.pop(0) if deadlines else None

        reaper = Reaper(check, "test")
        reaper.start()
        await _until(lambda: len(calls) == 1, "the first check")
        for _ in range(20):  # nothing to watch: no timer, no further check
            await asyncio.sleep(0)
        assert len(calls) == 1
        deadlines.append(time.monotonic() + 0.05)  # the next check returns a deadline...
        reaper.due(time.monotonic())  # ...and a deadline now wakes it
        await _until(lambda: len(calls) == 3, "the check at the returned deadline")
        assert calls[2] >= calls[1] + 0.05 - 0.005
        reaper.due(time.monotonic() + 3600)  # nothing nearer than what it waits for (forever): wakes it
        await _until(lambda: len(calls) == 4, "the check after due()")
        await reaper.stop()

    asyncio.run(scenario())


def test_a_failing_check_is_retried_not_fatal():
    async def scenario():
        calls = []

        def check(now):
            calls.append(now)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return None

        reaper = Reaper(check, "test")
        reaper.start()
        await _until(lambda: len(calls) == 2, "the retry")
        await reaper.stop()

    asyncio.run(scenario())


def test_a_silent_member_of_a_classic_group_is_removed_at_its_session_timeout():
    async def scenario():
        async with _running(GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)) as c:
            assert c.expire(time.monotonic()) is None  # no group: nothing to wake for
            a = await c.join("g", "", None, "c", "/h", 300, 300, "consumer", PROTOCOLS, False)
            b = await c.join("h", "", None, "c", "/h", 60_000, 60_000, "consumer", PROTOCOLS, False)
            assert c.expire(time.monotonic()) <= time.monotonic() + 0.3  # a's session is the nearest deadline
            await _until(lambda: a["member_id"] not in c.group("g").members, "a's session to end")
            assert b["member_id"] in c.group("h").members  # its session is a minute
            pending = await c.join("p", "", None, "c", "/h", 200, 200, "consumer", PROTOCOLS, True)
            assert pending["member_id"] in c.group("p").pending
            await _until(lambda: not c.group("p").pending, "the unused member id to go")

    asyncio.run(scenario())


def test_a_heartbeating_classic_member_stays_past_its_first_deadline():
    async def scenario():
        async with _running(GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)) as c:
            a = await c.join("g", "", None, "c", "/h", 1000, 1000, "consumer", PROTOCOLS, False)
            until = time.monotonic() + 2.0
            while time.monotonic() < until:  # beats every 20 ms past two session timeouts
                assert c.heartbeat("g", a["member_id"], None, a["generation_id"]) == 0
                await asyncio.sleep(0.02)
            assert a["member_id"] in c.group("g").members
            await _until(lambda: a["member_id"] not in c.group("g").members, "the session to end once beats stop")

    asyncio.run(scenario())


def test_a_consumer_group_member_that_stops_heartbeating_is_removed():
    async def scenario():
        class Registry:
            topics: dict = {}

            def get(self, name):
                return None

        async with _running(ConsumerGroupCoordinator(Registry(), ConsumerGroupSettings(session_timeout_ms=300))) as c:
            assert c.expire() is None
            body = c.heartbeat("g", "m1", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1000,
                               subscribed_names=("t",), subscribed_regex=None, server_assignor=None, owned={},
                               client_id="c", client_host="/h", version=1)
            assert body["member_id"] == "m1"
            await _until(lambda: "m1" not in c.group("g").members, "the session to end")

    asyncio.run(scenario())


def test_a_share_member_taken_on_without_a_join_still_times_out(tmp_path):
    """A share-partition leader in a cluster takes on a member at its first ShareFetch (no heartbeat here): the
    idle coordinator's checks start with it, and it leaves after the group's session timeout."""
    async def scenario():
        registry = TopicRegistry(str(tmp_path))
        coordinator = ShareGroupCoordinator(registry, ShareSettings(session_timeout_ms=200))
        async with _running(coordinator) as c:
            await _until(lambda: c._reaper.checks == 1, "the first check")  # no member, no lock: then it waits
            for _ in range(20):
                await asyncio.sleep(0)
            assert c._reaper.checks == 1
            group = c.group("g", create=True)
            group.members["m"] = ShareMember("m", 0, "c", "h", None, ())  # as handlers/share.py does
            c.member("g", "m")  # its first request here
            await _until(lambda: "m" not in group.members, "the member's session to end")
        registry.close()

    asyncio.run(scenario())

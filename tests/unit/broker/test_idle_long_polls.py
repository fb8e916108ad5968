"""A long poll that times out leaves nothing behind: on an idle broker (no write rounds) the futures of
Fetch and ShareFetch waits that ended must not pile up until the next write."""

import asyncio

from freshet.broker.durability import GroupCommit
from freshet.broker.groups.share import ShareGroupCoordinator


def test_a_cancelled_high_watermark_wait_leaves_the_group_commits_listeners():
    async def main():
        commit = GroupCommit()
        waits = [commit.high_watermark_moved() for _ in range(100)]
        for fut in waits:
            fut.cancel()
        await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
        assert not commit._listeners
        live = commit.high_watermark_moved()
        assert commit._listeners == {live}

    asyncio.run(main())


def test_a_cancelled_share_fetch_wait_leaves_the_share_coordinator(tmp_path):
    from freshet.broker.topics.registry import TopicRegistry

    async def main():
        registry = TopicRegistry(str(tmp_path))
        try:
            coordinator = ShareGroupCoordinator(registry)
            waits = [coordinator.records_available() for _ in range(100)]
            for fut in waits:
                fut.cancel()
            await asyncio.sleep(0)
            assert not coordinator._available
            live = coordinator.records_available()
            coordinator.wake()
            assert live.done() and not coordinator._available
        finally:
            registry.close()

    asyncio.run(main())

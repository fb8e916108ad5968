"""The share-group coordinator in cluster mode, without processes: the leader of ``__share_group_state`` (the share
coordinator) takes the state over from the topic; a partition's leader loads its window once per leader epoch and
forgets it when the epoch moves; only the share coordinator appends to the topic."""

import asyncio

from kio.schema.errors import ErrorCode

from freshet.broker.groups.share import ShareGroupCoordinator
from freshet.broker.groups.share_state import ShareStateStore, StateError, from_batches
from freshet.broker.topics.registry import TopicRegistry
from freshet.format.record_batch import encode_batch


class Persister:
    """The share coordinator as a store in process (what SharePersister does when it leads the topic)."""

    def __init__(self) -> None:
        self.store = ShareStateStore()
        self.reads = 0

    async def read(self, group_id, topic, topic_id, index, leader_epoch, timeout_s=30.0):
        self.reads += 1
        return self.store.read(group_id, topic, str(topic_id), index, leader_epoch)

    def write(self, group_id, topic, topic_id, index, leader_epoch, state_epoch, window):
        fut = asyncio.get_running_loop().create_future()
        self.store.apply([self.store.write(group_id, topic, str(topic_id), index, leader_epoch, state_epoch, window)])
        fut.set_result(None)
        return fut


def leader_of_ten_records(tmp_path) -> tuple[TopicRegistry, ShareGroupCoordinator]:
    """A cluster broker's share-group coordinator and a topic ``t`` of one partition holding 10 records."""
    registry = TopicRegistry(str(tmp_path))
    registry.create("t", 1)
    log = registry.partition("t", 0)
    log.append(encode_batch([(None, b"v%d" % i, 1) for i in range(10)]))
    log.high_watermark = log.log_end_offset
    return registry, ShareGroupCoordinator(registry, clustered=True)


def test_a_new_share_coordinator_takes_the_state_over(tmp_path):
    registry = TopicRegistry(str(tmp_path))
    first = ShareGroupCoordinator(registry, clustered=True)
    assert first._append([(b'["group","g"]', b'{"configs":{}}')]) == -1  # not the coordinator: nothing written
    assert registry.get("__share_group_state").partitions[0].log_end_offset == 0
    first.follow(0)
    window = from_batches(4, [(4, 5, 2, 1)])
    first._append([first.store.write("g", "t", "id", 0, 1, 0, window)])
    registry.get("__share_group_state").partitions[0].high_watermark = 0  # a follower's: behind its log end

    second = ShareGroupCoordinator(registry, clustered=True)
    second.follow(1)  # reads to the log end, not the high watermark
    assert second.store.read("g", "t", "id", 0, 1)["start_offset"] == 4
    second.follow(None)
    assert second.store.values == {}
    registry.close()


def test_a_groups_configs_are_the_cluster_metadatas_on_every_broker(tmp_path):
    """Cluster mode: a group's configs are what the metadata holds (IncrementalAlterConfigs through any broker goes
    to the controller), for groups this broker holds and those it creates later; none are written to the topic."""
    registry = TopicRegistry(str(tmp_path))
    coordinator = ShareGroupCoordinator(registry, clustered=True)
    coordinator.follow(0)  # the share coordinator too: it still writes no group record
    held = coordinator.group("g", create=True)
    coordinator.take_configs({"g": {"share.delivery.count.limit": "3"}, "later": {"share.auto.offset.reset": "earliest"}})
    assert held.configs == {"share.delivery.count.limit": "3"} and coordinator.setting(held, "delivery_count_limit") == 3
    assert coordinator.configs_of("later") == {"share.auto.offset.reset": "earliest"}  # before the group exists
    assert coordinator.group("later", create=True).configs == {"share.auto.offset.reset": "earliest"}
    coordinator.take_configs({})  # deleted in the metadata
    assert held.configs == {} and coordinator.configs_of("g") == {}
    assert registry.get("__share_group_state").partitions[0].log_end_offset == 0
    registry.close()


def test_a_partition_leader_loads_its_window_once_per_leader_epoch(tmp_path):
    async def scenario():
        registry, coordinator = leader_of_ten_records(tmp_path)
        persister = coordinator.persister = Persister()
        topic_id = str(registry.get("t").topic_id)
        persister.store.apply([persister.store.write("g", "t", topic_id, 0, 0, 0,
                                                     from_batches(3, [(3, 4, 2, 1), (5, 5, 1, 2)]))])
        epochs = {("t", 0): 1}
        coordinator.led_epoch = lambda topic, index: epochs.get((topic, index))
        group = coordinator.group("g", create=True)

        wanted = coordinator.to_load(group, [("t", 0)])
        assert wanted == [("t", 0, 1)]
        await asyncio.gather(coordinator.load(group, wanted), coordinator.load(group, wanted))
        assert persister.reads == 1  # two fetches, one read
        sp = coordinator.share_partition(group, "t", 0)
        assert (sp.start_offset, sp.record(5).state, sp.record(5).delivery_count) == (5, 0, 2)  # its lock died
        assert coordinator.to_load(group, [("t", 0)]) == []

        epochs[("t", 0)] = 2  # led again after another broker led it: what this broker held is stale
        assert coordinator.share_partition(group, "t", 0) is None
        assert coordinator.to_load(group, [("t", 0)]) == [("t", 0, 2)]
        del epochs[("t", 0)]  # not led at all: nothing to load, nothing served
        assert coordinator.to_load(group, [("t", 0)]) == []
        assert persister.store.read("g", "t", topic_id, 0, 2)["start_offset"] == 3  # nothing written meanwhile
        registry.close()

    asyncio.run(scenario())


class FencingPersister(Persister):
    """``Persister`` whose refused writes fail their future, as SharePersister's do."""

    def write(self, group_id, topic, topic_id, index, leader_epoch, state_epoch, window):
        fut = asyncio.get_running_loop().create_future()
        try:
            self.store.apply([self.store.write(group_id, topic, str(topic_id), index, leader_epoch, state_epoch,
                                               window)])
            fut.set_result(None)
        except StateError as exc:
            fut.set_exception(exc)
        return fut


async def loaded_at_3(tmp_path):
    """A partition leader (leader epoch 1) that loaded g's window of t-0, stored at start 3 in state epoch 0, from
    a share coordinator in process (``FencingPersister``): (registry, coordinator, its store, t's id, g)."""
    registry, coordinator = leader_of_ten_records(tmp_path)
    persister = coordinator.persister = FencingPersister()
    store, topic_id = persister.store, str(registry.get("t").topic_id)
    store.apply([store.write("g", "t", topic_id, 0, 0, 0, from_batches(3, []))])
    coordinator.led_epoch = lambda topic, index: 1
    group = coordinator.group("g", create=True)
    await coordinator.load(group, coordinator.to_load(group, [("t", 0)]))
    assert coordinator.share_partition(group, "t", 0).start_offset == 3
    return registry, coordinator, store, topic_id, group


def test_a_partition_leader_reads_its_window_again_once_offsets_are_reset_or_deleted(tmp_path):
    async def scenario():
        registry, coordinator, store, topic_id, group = await loaded_at_3(tmp_path)

        # AlterShareGroupOffsets: the coordinator initializes it at 7 in state epoch 1; a member opening a session
        # here makes the leader read it again (a loaded window is not reloaded otherwise)
        store.apply([store.initialize("g", "t", topic_id, 0, 1, 7)])
        assert coordinator.to_load(group, [("t", 0)]) == []
        await coordinator.load(group, coordinator.to_load(group, [("t", 0)], recheck=True))
        sp = coordinator.share_partition(group, "t", 0)
        assert (sp.start_offset, sp.state_epoch) == (7, 1)
        persister = coordinator.persister
        reads = persister.reads
        await coordinator.load(group, coordinator.to_load(group, [("t", 0)], recheck=True))
        assert persister.reads == reads + 1 and coordinator.share_partition(group, "t", 0) is sp  # nothing new

        # reset again: the old window's next write is fenced (FENCED_STATE_EPOCH), nothing of it stored, forgotten
        store.apply([store.initialize("g", "t", topic_id, 0, 2, 8)])
        written = coordinator.write_partitions(group, [("t", 0)])
        await asyncio.gather(*written, return_exceptions=True)
        assert written[0].exception().error_code == ErrorCode.fenced_state_epoch
        assert coordinator.existing_partition(group, "t", 0) is None
        assert store.get_partition("g", "t", topic_id, 0)["start_offset"] == 8
        await coordinator.load(group, coordinator.to_load(group, [("t", 0)]))
        assert coordinator.share_partition(group, "t", 0).start_offset == 8

        # DeleteShareGroupState: a window the coordinator held is gone; the leader starts afresh (latest: 10)
        store.apply([store.delete("g", "t", 0)])
        await coordinator.load(group, coordinator.to_load(group, [("t", 0)], recheck=True))
        assert coordinator.share_partition(group, "t", 0).start_offset == 10
        assert store.get_partition("g", "t", topic_id, 0)["start_offset"] == 10  # the fresh start written
        registry.close()

    asyncio.run(scenario())


def test_a_partition_leader_holding_a_deleted_window_is_fenced_and_starts_afresh(tmp_path):
    """The leader of t-0 holds g's window (start 3) when the group coordinator deletes g's state; its next write
    (a lock expiring, an acknowledgement) is fenced (the delete's marker is in a newer state epoch) and forgotten
    rather than stored again, and it loads again: no window, so it starts by share.auto.offset.reset (latest: 10)
    in the deleted state's epoch, and that start is stored."""
    async def scenario():
        registry, coordinator, store, topic_id, group = await loaded_at_3(tmp_path)

        store.apply([store.delete("g", "t", 0)])  # DeleteGroups / DeleteShareGroupOffsets at the coordinator
        written = coordinator.write_partitions(group, [("t", 0)])
        await asyncio.gather(*written, return_exceptions=True)
        assert written[0].exception().error_code == ErrorCode.fenced_state_epoch
        assert store.get_partition("g", "t", topic_id, 0)["start_offset"] == -1  # not stored again
        assert coordinator.existing_partition(group, "t", 0) is None
        await coordinator.load(group, coordinator.to_load(group, [("t", 0)]))
        sp = coordinator.share_partition(group, "t", 0)
        assert (sp.start_offset, sp.state_epoch) == (10, 1)
        value = store.get_partition("g", "t", topic_id, 0)
        assert (value["start_offset"], value["state_epoch"]) == (10, 1)
        registry.close()

    asyncio.run(scenario())


def test_a_member_joining_a_share_group_being_deleted_is_refused_until_the_delete_ends(tmp_path):
    """DeleteGroups of a share group in a cluster awaits DeleteShareGroupState and the controller (its configs). Kafka's
    coordinator deletes a group at once (a Dead group answers a join COORDINATOR_NOT_AVAILABLE: the member finds its
    coordinator and rejoins); here a ShareGroupHeartbeat joining meanwhile is refused the same way, the delete deletes
    it all (state, configs, group), and the member's retry afterwards makes a new group without the old configs."""
    from types import SimpleNamespace

    from freshet.broker.groups.share import ShareGroupError
    from freshet.broker.handlers.share_state import delete_share_group_in_cluster

    registry = TopicRegistry(str(tmp_path))
    coordinator = ShareGroupCoordinator(registry, clustered=True)
    coordinator.group("g", create=True)
    coordinator.take_configs({"g": {"share.delivery.count.limit": "3"}})
    commands, refusals = [], []

    def join():
        return coordinator.heartbeat("g", "m1", 0, ("t",), None, "consumer", "/127.0.0.1")

    class Deleting:
        async def delete(self, group_id, partitions):  # while the share coordinator deletes, a consumer joins
            await asyncio.sleep(0)
            try:
                join()
            except ShareGroupError as exc:
                refusals.append(exc.error_code)

    async def command(cmd, timeout_s=30.0):
        commands.append(cmd)
        coordinator.take_configs({})  # the controller's record reaches this broker
        return {"error": "NONE", "error_code": 0, "message": "", "value": None}

    async def wait_for(predicate, timeout_s=30.0):
        return True

    coordinator.persister = Deleting()
    view = SimpleNamespace(topics={"t": SimpleNamespace(topic_id="id", partitions=(0,))})
    broker = SimpleNamespace(share_groups=coordinator, cluster=SimpleNamespace(view=view, command=command,
                                                                              wait_for=wait_for))
    try:
        assert asyncio.run(delete_share_group_in_cluster(SimpleNamespace(broker=broker), "g")) == ErrorCode.none
        assert refusals == [ErrorCode.coordinator_not_available]
        assert "g" not in coordinator.groups and len(commands) == 1
        assert join()["member_epoch"] == 1  # the retry: a new, empty group of that name
        assert coordinator.configs_of("g") == {}
    finally:
        registry.close()

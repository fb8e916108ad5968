"""KIP-848 consumer groups in ``__consumer_offsets`` as Kafka's ConsumerGroup* records (``groups.consumer_records``):
the records' layout, what a coordinator writes as its groups change, and a fresh coordinator taking the groups
over from them: same members, epochs and assignments, a member's next heartbeat answered at its epoch."""

import pytest

from freshet.broker.groups import consumer_records as cr
from freshet.broker.groups.consumer import (MEMBER_STABLE, UNREVOKED, ConsumerGroupCoordinator, ConsumerGroupError)
from freshet.broker.groups.offsets import OffsetStore
from freshet.broker.topics.registry import TopicRegistry


@pytest.fixture
def registry(tmp_path):
    registry = TopicRegistry(str(tmp_path))
    registry.create("orders", 4)
    registry.create("payments", 2)
    yield registry
    registry.close()


def coordinator_with_store(registry):
    coordinator = ConsumerGroupCoordinator(registry)
    store = cr.ConsumerGroupStore(coordinator, OffsetStore(registry))
    coordinator.on_change = store.changed
    return coordinator, store


def beat(coordinator, member_id, epoch, topics=("orders", "payments"), owned=None, instance_id=None):
    return coordinator.heartbeat(
        "g", member_id, epoch, instance_id=instance_id, rack_id="rack-1" if member_id == "m-1" else None,
        rebalance_timeout_ms=45000 if epoch == 0 else -1, subscribed_names=tuple(topics) if epoch == 0 else None,
        subscribed_regex=None, server_assignor=None, owned={} if owned is None else owned, client_id=f"c-{member_id}",
        client_host="/127.0.0.1", version=1)


def settle(coordinator):
    """Heartbeats owning what each member was given, until the group is stable."""
    for _ in range(10):
        group = coordinator.group("g")
        if group.state == "Stable":
            return group
        for m in list(group.members.values()):
            beat(coordinator, m.member_id, m.epoch, owned=m.assigned)
    raise AssertionError(f"group not stable: {coordinator.group('g').state}")


def snapshot(group):
    return (group.epoch, group.assignment_epoch, group.topics_seen, group.target,
            {m.member_id: (m.epoch, m.previous_epoch, m.state, m.assigned, m.pending_revocation, m.instance_id,
                           m.rack_id, m.client_id, m.client_host, m.subscribed_names, m.rebalance_timeout_ms)
             for m in group.members.values()})


def test_keys_and_values_have_kafkas_layout():
    assert cr._key(cr.GROUP, "g") == b"\x00\x03\x00\x01g"
    assert cr._key(cr.CURRENT, "g", "m") == b"\x00\x08\x00\x01g\x00\x01m"
    assert cr.decode_key(b"\x00\x05\x00\x01g\x00\x02m1") == (cr.MEMBER, "g", "m1")
    assert cr.decode_key(b"\x00\x06\x00\x01g") == (cr.TARGET, "g", None)
    assert cr.decode_key(b"\x00\x02\x00\x01g") is None  # a classic group's GroupMetadata
    assert cr.decode_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00") is None  # an offset commit
    # ConsumerGroupMetadataValue v0 (flexible): epoch, then an empty tagged-fields section
    assert cr._value(b"\x00\x00\x00\x07") == b"\x00\x00\x00\x00\x00\x07\x00"
    assert cr.decode_value(cr.GROUP, b"\x00\x00\x00\x00\x00\x07\x00") == {"epoch": 7}
    with pytest.raises(ValueError):
        cr.decode_value(cr.GROUP, b"\x00\x01\x00\x00\x00\x07\x00")


def test_a_fresh_coordinator_takes_the_members_over_at_their_epochs(registry):
    coordinator, store = coordinator_with_store(registry)
    beat(coordinator, "m-1", 0)
    beat(coordinator, "m-2", 0, instance_id="static-2")
    before = snapshot(settle(coordinator))
    assert {m.epoch for m in coordinator.group("g").members.values()} == {coordinator.group("g").epoch}

    found = cr.read(store.offsets.partition)
    assert set(found) == {"g"}
    fresh, fresh_store = coordinator_with_store(registry)
    assert cr.restore(fresh_store, found) == 2
    group = fresh.group("g")
    assert snapshot(group) == before and group.state == "Stable"
    # a member's next heartbeat is answered at its epoch (with its partitions), its commits accepted
    m1 = group.members["m-1"]
    body = beat(fresh, "m-1", m1.epoch, owned=m1.assigned)
    assert body["member_epoch"] == m1.epoch == before[0] and body["assignment"] == before[4]["m-1"][3]
    fresh.check_commit("g", "m-2", group.members["m-2"].epoch)
    assert fresh.group("g").epoch == before[0]  # no new epoch: no rebalance
    # the store starts from what the log holds: nothing changed, nothing written
    end = fresh_store.offsets.partition.log_end_offset
    beat(fresh, "m-2", group.members["m-2"].epoch, owned=group.members["m-2"].assigned)
    assert fresh_store.offsets.partition.log_end_offset == end


def test_an_unknown_member_is_still_refused_after_a_takeover(registry):
    coordinator, store = coordinator_with_store(registry)
    beat(coordinator, "m-1", 0)
    settle(coordinator)
    fresh, fresh_store = coordinator_with_store(registry)
    cr.restore(fresh_store, cr.read(store.offsets.partition))
    with pytest.raises(ConsumerGroupError) as err:
        beat(fresh, "nobody", 3)
    assert err.value.error_code.name == "unknown_member_id"


def test_a_member_revoking_is_taken_over_revoking(registry):
    coordinator, store = coordinator_with_store(registry)
    beat(coordinator, "m-1", 0)
    settle(coordinator)
    beat(coordinator, "m-2", 0)
    m1 = coordinator.group("g").members["m-1"]
    beat(coordinator, "m-1", m1.epoch, owned=m1.assigned)  # told to give partitions up
    assert m1.state == UNREVOKED and m1.pending_revocation
    before = snapshot(coordinator.group("g"))
    fresh, fresh_store = coordinator_with_store(registry)
    cr.restore(fresh_store, cr.read(store.offsets.partition))
    assert snapshot(fresh.group("g")) == before
    taken = fresh.group("g").members["m-1"]
    assert taken.revocation_deadline > 0  # its rebalance timeout counts from the takeover
    # it revokes on the new coordinator and the group settles there
    beat(fresh, "m-1", taken.epoch, owned=taken.assigned)
    assert settle(fresh).members["m-1"].state == MEMBER_STABLE


def test_a_member_gone_and_a_group_deleted_leave_tombstones(registry):
    coordinator, store = coordinator_with_store(registry)
    beat(coordinator, "m-1", 0)
    beat(coordinator, "m-2", 0)
    settle(coordinator)
    beat(coordinator, "m-2", -1)  # leaves
    found = cr.read(store.offsets.partition)
    members = {cr.decode_key(k)[2] for k in found["g"]} - {None}
    assert members == {"m-1"}
    beat(coordinator, "m-1", -1)
    coordinator.delete("g")
    assert cr.read(store.offsets.partition) == {}
    fresh, fresh_store = coordinator_with_store(registry)
    assert cr.restore(fresh_store, cr.read(store.offsets.partition)) == 0 and fresh.group("g") is None
    store.offsets.reload()  # the commits' replay passes over these records
    assert store.offsets.groups() == []


def test_an_expired_member_leaves_its_records(registry):
    coordinator, store = coordinator_with_store(registry)
    beat(coordinator, "m-1", 0)
    beat(coordinator, "m-2", 0)
    settle(coordinator)
    coordinator.group("g").members["m-2"].last_seen -= 3600
    coordinator.expire()
    fresh, fresh_store = coordinator_with_store(registry)
    assert cr.restore(fresh_store, cr.read(store.offsets.partition)) == 1
    assert set(fresh.group("g").members) == {"m-1"}
    assert fresh.group("g").epoch == coordinator.group("g").epoch


def test_the_commits_and_classic_groups_replays_pass_over_the_records(registry):
    """The offsets' replay (a restarted one-node broker's, a new coordinator's) and the classic groups' read see
    only their own records in a log that holds consumer group records too."""
    from freshet.broker.groups import group_metadata
    from freshet.broker.groups.offsets import CommittedOffset

    coordinator, store = coordinator_with_store(registry)
    store.offsets.append("g", {("orders", 0): CommittedOffset(42, 3, "", 1000)})
    beat(coordinator, "m-1", 0)
    settle(coordinator)
    assert cr.read(store.offsets.partition)  # live records in the log
    again = OffsetStore(registry)
    again.reload()
    assert again.groups() == ["g"] and again.committed("g")[("orders", 0)].offset == 42
    assert group_metadata.read(store.offsets.partition) == {}

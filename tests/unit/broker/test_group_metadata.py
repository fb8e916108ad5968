"""Classic groups' membership as Kafka's GroupMetadata records (``groups.group_metadata``): the record's layout,
and a coordinator taking a group over from the records as it was (members, generation, assignments)."""

import time

from freshet.broker.groups import group_metadata as gm
from freshet.broker.groups.classic import EMPTY, STABLE, Group, GroupCoordinator, Member


def stable_group() -> Group:
    g = Group("orders", state=STABLE, generation=7, protocol_type="consumer", protocol_name="range", leader="m-1")
    g.members["m-1"] = Member("m-1", None, "client-a", "/127.0.0.1", 45000, 300000, "consumer",
                              [("range", b"sub-1"), ("roundrobin", b"other")], assignment=b"assign-1")
    g.members["m-2"] = Member("m-2", "static-2", "client-b", "/127.0.0.2", 30000, 60000, "consumer",
                              [("range", b"sub-2")], assignment=b"assign-2")
    return g


def test_records_have_kafkas_layout_and_round_trip():
    key = gm.encode_key("orders")
    assert key == b"\x00\x02\x00\x06orders" and gm.decode_key(key) == "orders"
    assert gm.decode_key(b"\x00\x01\x00\x06orders\x00\x01t\x00\x00\x00\x00") is None  # an offset commit's key
    value = gm.encode_value(stable_group(), now_ms=1234)
    assert value[:2] == b"\x00\x03"
    decoded = gm.decode_value(value)
    assert decoded == {
        "protocol_type": "consumer", "generation": 7, "protocol": "range", "leader": "m-1", "state_timestamp": 1234,
        "members": [
            {"member_id": "m-1", "group_instance_id": None, "client_id": "client-a", "client_host": "/127.0.0.1",
             "rebalance_timeout_ms": 300000, "session_timeout_ms": 45000, "subscription": b"sub-1",
             "assignment": b"assign-1"},
            {"member_id": "m-2", "group_instance_id": "static-2", "client_id": "client-b",
             "client_host": "/127.0.0.2", "rebalance_timeout_ms": 60000, "session_timeout_ms": 30000,
             "subscription": b"sub-2", "assignment": b"assign-2"}]}


def test_a_new_coordinator_takes_the_group_over_as_it_was():
    coordinator = GroupCoordinator()
    before = time.monotonic()
    empty = Group("idle", state=EMPTY, generation=3, protocol_type="consumer")
    records = {"orders": gm.decode_value(gm.encode_value(stable_group())),
               "idle": gm.decode_value(gm.encode_value(empty)), "gone": None}
    coordinator.groups["gone"] = Group("gone")
    assert gm.restore(coordinator, records) == 2
    g = coordinator.group("orders")
    assert (g.state, g.generation, g.protocol_name, g.leader) == (STABLE, 7, "range", "m-1")
    assert {m.member_id: m.assignment for m in g.members.values()} == {"m-1": b"assign-1", "m-2": b"assign-2"}
    assert g.static_members == {"static-2": "m-2"} and g.members["m-1"].last_heartbeat >= before
    assert g.members["m-2"].metadata_for("range") == b"sub-2"
    # the members go on: a heartbeat and a commit of generation 7 are accepted, no rebalance
    assert coordinator.heartbeat("orders", "m-1", None, 7) == 0
    coordinator.check_commit("orders", "m-2", "static-2", 7)
    assert coordinator.group("idle").state == EMPTY and coordinator.group("idle").generation == 3
    assert coordinator.group("gone") is None


def test_stored_records_are_read_back_and_a_deleted_group_leaves_a_tombstone(tmp_path):
    from freshet.broker.groups.offsets import OffsetStore
    from freshet.broker.topics.registry import TopicRegistry

    registry = TopicRegistry(str(tmp_path))
    offsets = OffsetStore(registry)
    coordinator = GroupCoordinator()
    coordinator.on_change = lambda g: gm.store(offsets, g)
    coordinator._changed(stable_group())
    coordinator.groups["old"] = Group("old", state=EMPTY, generation=2)
    coordinator._changed(coordinator.groups["old"])
    assert set(gm.read(offsets.partition)) == {"orders", "old"}
    coordinator.delete("old")
    records = gm.read(offsets.partition)
    assert records["old"] is None and records["orders"]["generation"] == 7
    offsets.reload()  # the commits' replay passes over the group records
    assert offsets.groups() == []
    registry.close()

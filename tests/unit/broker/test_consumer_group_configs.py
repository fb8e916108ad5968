"""Kafka 4.0's consumer-group configs (GroupConfig, KIP-848) in the coordinator: a group's own
consumer.session.timeout.ms expires its members (and only its), its consumer.heartbeat.interval.ms is what its
heartbeats are answered with; the broker's group.consumer.min/max.* bound them."""

import pytest

from freshet.broker.config import ConsumerGroupSettings
from freshet.broker.groups.consumer import ConsumerGroupCoordinator, ConsumerGroupError
from freshet.broker.topics.registry import TopicRegistry


@pytest.fixture
def coordinator(tmp_path):
    registry = TopicRegistry(str(tmp_path))
    registry.create("orders", 2)
    yield ConsumerGroupCoordinator(registry, ConsumerGroupSettings())
    registry.close()


def join(coordinator, group, member):
    return coordinator.heartbeat(group, member, 0, instance_id=None, rack_id=None, rebalance_timeout_ms=45000,
                                 subscribed_names=("orders",), subscribed_regex=None, server_assignor=None, owned={},
                                 client_id="c", client_host="/127.0.0.1", version=1)


def test_a_groups_session_timeout_expires_its_members_and_no_others(coordinator):
    coordinator.validate_configs("long", {"consumer.session.timeout.ms": "60000"})
    coordinator.alter_configs("long", {"consumer.session.timeout.ms": "60000"})
    join(coordinator, "long", "m-long")
    join(coordinator, "default", "m-default")
    for group in ("long", "default"):
        for member in coordinator.group(group).members.values():
            member.last_seen -= 50  # past the broker's 45 s, within the group's own 60 s
    coordinator.expire()
    assert set(coordinator.group("long").members) == {"m-long"}
    assert coordinator.group("default").members == {}
    coordinator.alter_configs("long", {"consumer.session.timeout.ms": None})  # back to the broker's 45 s
    coordinator.expire()
    assert coordinator.group("long").members == {}


def test_a_groups_heartbeat_interval_is_in_its_heartbeat_answers(coordinator):
    coordinator.alter_configs("g", {"consumer.heartbeat.interval.ms": "7000"})
    assert join(coordinator, "g", "m")["heartbeat_interval_ms"] == 7000
    assert join(coordinator, "other", "m")["heartbeat_interval_ms"] == 5000


@pytest.mark.parametrize("changes", [
    {"consumer.session.timeout.ms": "44999"},  # below group.consumer.min.session.timeout.ms
    {"consumer.session.timeout.ms": "60001"},  # above group.consumer.max.session.timeout.ms
    {"consumer.heartbeat.interval.ms": "4999"},
    {"consumer.heartbeat.interval.ms": "15001"},
    {"consumer.heartbeat.interval.ms": "ten"},
])
def test_a_value_out_of_the_brokers_bounds_is_invalid_config(coordinator, changes):
    with pytest.raises(ConsumerGroupError) as refused:
        coordinator.validate_configs("g", changes)
    assert refused.value.error_code.name == "invalid_config"


def test_bounds_take_in_the_brokers_own_defaults(tmp_path):
    registry = TopicRegistry(str(tmp_path))
    try:
        quick = ConsumerGroupCoordinator(registry, ConsumerGroupSettings(session_timeout_ms=6000,
                                                                         heartbeat_interval_ms=500))
        quick.validate_configs("g", {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "500"})
        with pytest.raises(ConsumerGroupError, match="less than consumer.session.timeout.ms"):
            quick.validate_configs("g", {"consumer.session.timeout.ms": "6000",
                                         "consumer.heartbeat.interval.ms": "6000"})
    finally:
        registry.close()


def test_a_one_node_brokers_group_configs_outlive_its_restart(tmp_path):
    registry = TopicRegistry(str(tmp_path / "data"))
    path = str(tmp_path / "consumer-group-configs.json")
    try:
        first = ConsumerGroupCoordinator(registry, configs_path=path)
        first.alter_configs("g", {"consumer.session.timeout.ms": "50000"})
        restarted = ConsumerGroupCoordinator(registry, configs_path=path)
        assert restarted.setting("g", "session_timeout_ms") == 50000
        restarted.alter_configs("g", {"consumer.session.timeout.ms": None})
        assert ConsumerGroupCoordinator(registry, configs_path=path).configs == {}
    finally:
        registry.close()

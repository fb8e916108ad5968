"""Kafka 4.0's consumer-group configs (GroupConfig, KIP-848) through confluent-kafka's AdminClient on the GROUP
resource: consumer.session.timeout.ms / consumer.heartbeat.interval.ms accepted within the broker's
group.consumer.min/max.* bounds, described back, refused out of them with nothing stored, and the group's
heartbeat interval in its ConsumerGroupHeartbeat answers (librdkafka's test 0081 sets them)."""

import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def alter(admin, group, configs: dict[str, str | None]):
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET if value is not None
                    else AlterConfigOpType.DELETE) for name, value in configs.items()])
    return admin.incremental_alter_configs([resource])[resource]


def described(admin, group) -> dict[str, tuple[str, str]]:
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, e.source) for name, e in entries.items() if name.startswith("consumer.")}


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def test_consumer_group_configs_are_accepted_described_and_bounded(admin):
    group = "cg-" + uuid.uuid4().hex[:8]
    default, own = 5, 8  # ConfigSource DEFAULT_CONFIG, GROUP_CONFIG
    # the shared broker runs with a 6 s session and a 0.5 s interval (tests/conftest.py QUICK_GROUPS)
    assert described(admin, group) == {SESSION: ("6000", default), INTERVAL: ("500", default)}
    alter(admin, group, {SESSION: "50000", INTERVAL: "2000"}).result(30)
    assert described(admin, group) == {SESSION: ("50000", own), INTERVAL: ("2000", own)}

    for bad in ({INTERVAL: "15001"},  # above group.consumer.max.heartbeat.interval.ms
                {SESSION: "60001", INTERVAL: "3000"},  # above group.consumer.max.session.timeout.ms: none applied
                {SESSION: "5999"},  # below the broker's own 6 s
                {INTERVAL: "50000"},  # not below the group's session timeout either
                {SESSION: "abc"}):
        with pytest.raises(KafkaException) as refused:
            alter(admin, group, bad).result(30)
        assert refused.value.args[0].name() == "INVALID_CONFIG", bad
        assert described(admin, group) == {SESSION: ("50000", own), INTERVAL: ("2000", own)}, bad

    alter(admin, group, {SESSION: None}).result(30)
    assert described(admin, group) == {SESSION: ("6000", default), INTERVAL: ("2000", own)}


def test_a_groups_heartbeat_interval_is_in_its_heartbeat_answers(broker, admin, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    group = "cg-" + uuid.uuid4().hex[:8]
    alter(admin, group, {INTERVAL: "3000"}).result(30)
    with RawConnection(broker.bootstrap) as conn:
        def join(group_id):
            return conn.request(68, 1, {
                "group_id": group_id, "member_id": "m-" + uuid.uuid4().hex[:6], "member_epoch": 0,
                "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                "subscribed_topic_names": [topic_name], "subscribed_topic_regex": None, "server_assignor": None,
                "topic_partitions": []})
        answer = join(group)
        assert answer.error_code == 0 and answer.heartbeat_interval.total_seconds() == 3.0
        other = join("cg-" + uuid.uuid4().hex[:8])
        assert other.error_code == 0 and other.heartbeat_interval.total_seconds() == 0.5  # the broker's

"""Topic configs changed at run time (IncrementalAlterConfigs, AlterConfigs), as Kafka's runbooks do it:
validated with Kafka's codes, persisted, in effect at once."""

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


def alter(admin, topic, *changes):
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in changes])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def configs(admin, topic):
    return {k: v.value for k, v in list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())[0]
            .result(10).items()}


def test_retention_segment_size_policy_and_message_size_change_live_and_persist(own_broker, topic_name):
    admin = create_topic(own_broker.bootstrap, topic_name, 1, {"segment.bytes": "1024"})
    p = Producer({"bootstrap.servers": own_broker.bootstrap, "linger.ms": 0})
    for i in range(60):
        p.produce(topic_name, b"x" * 100, key=b"k%d" % (i % 5), timestamp=int(time.time() * 1000) - 3_600_000)
        p.flush(10)
    alter(admin, topic_name, ("retention.ms", AlterConfigOpType.SET, "60000"),
          ("cleanup.policy", AlterConfigOpType.APPEND, "compact"), ("max.message.bytes", AlterConfigOpType.SET, "500"))
    seen = configs(admin, topic_name)
    assert (seen["retention.ms"], seen["cleanup.policy"], seen["max.message.bytes"]) == ("60000", "compact,delete",
                                                                                       "500")
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": own_broker.bootstrap, "group.id": "probe"})
    deadline = time.monotonic() + 20
    while probe.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5)[0] == 0:
        assert time.monotonic() < deadline, "an hour-old log was not cut at once by retention.ms=60000"
        time.sleep(0.2)
    errors = []
    p.produce(topic_name, b"y" * 2000, key=b"big", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors[0] is not None and errors[0].code() == 10  # MESSAGE_TOO_LARGE at the new limit
    alter(admin, topic_name, ("max.message.bytes", AlterConfigOpType.DELETE, None))
    own_broker.restart()
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    seen = configs(admin, topic_name)
    assert (seen["retention.ms"], seen["cleanup.policy"], seen["max.message.bytes"]) == ("60000", "compact,delete",
                                                                                       "1048588")
    probe.close()


@pytest.mark.parametrize("changes, code", [
    ([("retention.ms", AlterConfigOpType.SET, "soon")], "INVALID_CONFIG"),
    ([("no.such.config", AlterConfigOpType.SET, "1")], "INVALID_CONFIG"),
    ([("retention.ms", AlterConfigOpType.APPEND, "5")], "INVALID_CONFIG"),
    ([("cleanup.policy", AlterConfigOpType.SET, "sometimes")], "INVALID_CONFIG"),
    ([("message.timestamp.type", AlterConfigOpType.SET, "WallClock")], "INVALID_CONFIG"),
    ([("message.timestamp.before.max.ms", AlterConfigOpType.SET, "-1")], "INVALID_CONFIG"),
    ([("message.timestamp.after.max.ms", AlterConfigOpType.SET, str(2**63))], "INVALID_CONFIG"),
])
def test_bad_changes_are_refused_and_change_nothing(broker, topic_name, changes, code):
    admin = create_topic(broker.bootstrap, topic_name, 1, {"retention.ms": "123456"})
    with pytest.raises(KafkaException, match=code):
        alter(admin, topic_name, ("segment.bytes", AlterConfigOpType.SET, "2048"), *changes)
    seen = configs(admin, topic_name)
    assert (seen["retention.ms"], seen["segment.bytes"]) == ("123456", "1073741824")


def test_unknown_topics_internal_topics_and_the_legacy_api(broker, topic_name):
    admin = create_topic(broker.bootstrap, topic_name, 1)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        alter(admin, "no-such-topic", ("retention.ms", AlterConfigOpType.SET, "1000"))
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        alter(admin, "__consumer_offsets", ("retention.ms", AlterConfigOpType.SET, "1000"))
    with RawConnection(broker.bootstrap) as conn:  # AlterConfigs replaces the overrides whole
        r = conn.request(33, 2, {"resources": [{"resource_type": 2, "resource_name": topic_name, "configs": [
            {"name": "retention.ms", "value": "777"}]}], "validate_only": False})
        assert r.responses[0].error_code == 0
        r = conn.request(33, 2, {"resources": [{"resource_type": 2, "resource_name": topic_name, "configs": [
            {"name": "retention.ms", "value": "never"}]}], "validate_only": False})
        assert r.responses[0].error_code == 40  # INVALID_CONFIG
        r = conn.request(33, 2, {"resources": [{"resource_type": 2, "resource_name": topic_name, "configs": [
            {"name": "segment.bytes", "value": "4096"}]}], "validate_only": True})
        assert r.responses[0].error_code == 0
    seen = configs(admin, topic_name)
    assert (seen["retention.ms"], seen["segment.bytes"]) == ("777", "1073741824")


def test_log_append_time_and_timestamp_bounds_change_live(broker, topic_name):
    """message.timestamp.type switched to LogAppendTime: the producer's delivery reports and every consumer see
    the broker's clock (timestamp type 2 in librdkafka's terms). message.timestamp.before.max.ms: a record an
    hour old is refused with INVALID_TIMESTAMP and nothing is written."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition

    admin = create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports = []
    created = int(time.time() * 1000) - 10_000  # recent: a 1970 timestamp would be deleted by retention at once
    producer.produce(topic_name, b"created", timestamp=created, on_delivery=lambda err, msg: reports.append((err, msg)))
    producer.flush(10)
    alter(admin, topic_name, ("message.timestamp.type", AlterConfigOpType.SET, "LogAppendTime"))
    before = time.time() * 1000
    producer.produce(topic_name, b"appended", timestamp=created, on_delivery=lambda err, msg: reports.append((err, msg)))
    producer.flush(10)
    assert [err for err, _ in reports] == [None, None]
    assert reports[0][1].timestamp() == (TIMESTAMP_CREATE_TIME, created)
    kind, stamped = reports[1][1].timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and stamped >= before - 1000
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            seen.append((m.value(), m.timestamp()))
    consumer.close()
    assert seen == [(b"created", (TIMESTAMP_CREATE_TIME, created)), (b"appended", (TIMESTAMP_LOG_APPEND_TIME, stamped))]
    assert configs(admin, topic_name)["message.timestamp.type"] == "LogAppendTime"

    alter(admin, topic_name, ("message.timestamp.type", AlterConfigOpType.SET, "CreateTime"),
          ("message.timestamp.before.max.ms", AlterConfigOpType.SET, "60000"))
    errors = []
    producer.produce(topic_name, b"old", timestamp=int(time.time() * 1000) - 3600_000,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)  # a batch is refused whole: the next record goes in a batch of its own
    producer.produce(topic_name, b"now", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors[0] is not None and errors[0].name() == "INVALID_TIMESTAMP" and errors[1] is None
    low, high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name}).get_watermark_offsets(
        TopicPartition(topic_name, 0), timeout=10)
    assert high == 3  # created, appended, now: the old record was not written

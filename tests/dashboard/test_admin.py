"""The console's administration against a live broker: topics created, deleted (typed confirmation), configs
changed (the broker's INVALID_CONFIG shown, nothing changed), partitions added, records deleted; group offsets
reset with a dry run first (refused while the group has members) and groups deleted."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from fastapi.testclient import TestClient

from freshet.client import consumer_config
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.topics import create_topic


@pytest.fixture(scope="module")
def client(broker):
    return TestClient(create_app(Collector(broker.bootstrap)))


def configs(broker, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(10).items()}


def partition_count(broker, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def fill(broker, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for n in range(per_partition * partitions):
        producer.produce(topic, f"v{n}".encode(), partition=n % partitions)
    producer.flush(10)


def test_create_topic_with_configs_then_a_duplicate_is_refused(client, broker, topic_name):
    made = client.post("/api/topics", json={"name": topic_name, "partitions": 3, "configs": {"retention.ms": "60000"}})
    assert made.status_code == 201, made.text
    assert partition_count(broker, topic_name) == 3 and configs(broker, topic_name)["retention.ms"] == "60000"
    again = client.post("/api/topics", json={"name": topic_name, "partitions": 1})
    assert again.status_code == 409 and "TOPIC_ALREADY_EXISTS" in again.json()["detail"]
    bad = client.post("/api/topics", json={"name": topic_name + "-x", "configs": {"cleanup.policy": "sometimes"}})
    assert bad.status_code == 400 and "INVALID_CONFIG" in bad.json()["detail"], bad.text
    assert partition_count(broker, topic_name + "-x") is None
    assert client.post("/api/topics", json={"name": topic_name + "-y", "partitions": 0}).status_code == 422
    for body, error in (({"name": "no spaces allowed"}, "TOPIC_EXCEPTION"),
                        ({"name": topic_name + "-z", "replication_factor": 3}, "INVALID_REPLICATION_FACTOR")):
        refused = client.post("/api/topics", json=body)
        assert refused.status_code == 400 and error in refused.json()["detail"], refused.text
    assert partition_count(broker, topic_name + "-z") is None


def test_the_overview_shows_each_topics_retention_and_cleanup_policy(client, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"retention.ms": "86400000", "cleanup.policy": "compact,delete",
                                                   "retention.bytes": "1048576"})
    collector = client.app.state.collector
    collector.collect()
    t = client.get("/api/overview").json()["topics"][topic_name]
    assert (t["retention_ms"], t["retention_bytes"], t["cleanup_policy"]) == ("86400000", "1048576", "compact,delete")


def test_delete_topic_needs_its_name_typed(client, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    refused = client.delete(f"/api/topics/{topic_name}?confirm=wrong")
    assert refused.status_code == 400 and "confirm" in refused.json()["detail"]
    assert client.delete(f"/api/topics/{topic_name}").status_code == 400
    assert partition_count(broker, topic_name) == 1
    assert client.delete(f"/api/topics/{topic_name}?confirm={topic_name}").json() == {"deleted": topic_name}
    deadline = time.monotonic() + 30
    while partition_count(broker, topic_name) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert partition_count(broker, topic_name) is None
    missing = client.delete(f"/api/topics/{topic_name}?confirm={topic_name}")
    assert missing.status_code == 404 and "UNKNOWN_TOPIC_OR_PART" in missing.json()["detail"]


def test_config_edit_shows_the_brokers_invalid_config_and_changes_nothing(client, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"retention.ms": "3600000"})
    bad = client.patch(f"/api/topics/{topic_name}/configs",
                       json={"set": {"retention.ms": "7200000", "cleanup.policy": "sometimes"}})
    assert bad.status_code == 400
    detail = bad.json()["detail"]
    assert detail.startswith(f"cannot change configs of {topic_name!r}: INVALID_CONFIG: ") and "cleanup.policy" in detail
    assert configs(broker, topic_name)["retention.ms"] == "3600000"  # the good half was not applied either
    unknown = client.patch(f"/api/topics/{topic_name}/configs", json={"set": {"no.such.config": "1"}})
    assert unknown.status_code == 400 and "no.such.config" in unknown.json()["detail"]
    good = client.patch(f"/api/topics/{topic_name}/configs",
                        json={"set": {"retention.ms": "7200000"}, "delete": ["cleanup.policy"]})
    assert good.status_code == 200, good.text
    assert good.json()["configs"]["retention.ms"] == {"value": "7200000", "default": False}
    assert configs(broker, topic_name)["retention.ms"] == "7200000"
    reset = client.patch(f"/api/topics/{topic_name}/configs", json={"delete": ["retention.ms"]})
    assert reset.json()["configs"]["retention.ms"]["default"] is True
    assert client.patch(f"/api/topics/{topic_name}/configs", json={}).status_code == 400


def test_add_partitions_and_a_decrease_is_the_brokers_invalid_partitions(client, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    grown = client.post(f"/api/topics/{topic_name}/partitions", json={"count": 4})
    assert grown.status_code == 200, grown.text
    assert partition_count(broker, topic_name) == 4
    shrink = client.post(f"/api/topics/{topic_name}/partitions", json={"count": 3})
    assert shrink.status_code == 400 and "INVALID_PARTITIONS" in shrink.json()["detail"], shrink.text
    assert partition_count(broker, topic_name) == 4


def test_delete_records_moves_the_log_start(client, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    fill(broker, topic_name, 2, 10)
    moved = client.post(f"/api/topics/{topic_name}/delete-records", json={"partition": 1, "before_offset": 6})
    assert moved.status_code == 200, moved.text
    assert moved.json()["log_start_offset"] == 6
    consumer = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=10) == (6, 10)
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 10)
        beyond = client.post(f"/api/topics/{topic_name}/delete-records", json={"partition": 0, "before_offset": 11})
        assert beyond.status_code == 400 and "OFFSET_OUT_OF_RANGE" in beyond.json()["detail"], beyond.text
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 10)
    finally:
        consumer.close()


def committed(broker, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(consumer_config(broker.bootstrap, group, overrides={"log_level": 0}))
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)]
    finally:
        consumer.close()


def commit(broker, group: str, topic: str, offsets: list[int]) -> None:
    consumer = Consumer(consumer_config(broker.bootstrap, group, overrides={"log_level": 0}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in enumerate(offsets)], asynchronous=False)
    finally:
        consumer.close()


def test_reset_offsets_dry_run_commits_nothing_then_execute(client, broker, topic_name):
    group = topic_name + "-g"
    create_topic(broker.bootstrap, topic_name, 2)
    fill(broker, topic_name, 2, 10)
    commit(broker, group, topic_name, [8, 9])
    url = f"/api/groups/{group}/reset-offsets"
    dry = client.post(url, json={"topic": topic_name, "to": "earliest", "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json()["partitions"] == [{"partition": 0, "current": 8, "new": 0}, {"partition": 1, "current": 9, "new": 0}]
    assert committed(broker, group, topic_name, 2) == [8, 9]
    shift = client.post(url, json={"topic": topic_name, "to": "shift", "value": -3, "partitions": [1], "dry_run": True})
    assert shift.json()["partitions"] == [{"partition": 1, "current": 9, "new": 6}]
    done = client.post(url, json={"topic": topic_name, "to": "earliest", "partitions": [0], "dry_run": False})
    assert done.status_code == 200, done.text
    assert committed(broker, group, topic_name, 2) == [0, 9]
    latest = client.post(url, json={"topic": topic_name, "to": "timestamp", "value": "2999-01-01T00:00:00Z",
                                    "dry_run": False})
    assert [p["new"] for p in latest.json()["partitions"]] == [10, 10]  # after every record: the end
    assert committed(broker, group, topic_name, 2) == [10, 10]
    for body, words in (({"to": "shift"}, "needs a value"), ({"to": "timestamp", "value": "yesterday"}, "not a time"),
                        ({"to": "earliest", "partitions": [5]}, "partitions 0..1")):
        bad = client.post(url, json={"topic": topic_name, "dry_run": False, **body})
        assert bad.status_code == 400 and words in bad.json()["detail"], bad.text
    missing = client.post(url, json={"topic": topic_name + "-none", "to": "earliest"})
    assert missing.status_code == 404
    assert committed(broker, group, topic_name, 2) == [10, 10]


def test_reset_to_an_offset_and_by_a_duration(client, broker, topic_name):
    """As ``kafka-consumer-groups.sh --to-offset N`` (clamped to each partition's log) and ``--by-duration
    PnDTnHnMnS`` (the first offset at or after now minus the duration); bad values refused, nothing committed."""
    group = topic_name + "-g"
    create_topic(broker.bootstrap, topic_name, 2)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for n in range(10):  # partition 0: one record an hour, the last one now; partition 1: 3 records
        producer.produce(topic_name, b"v", partition=0, timestamp=now - (9 - n) * 3_600_000)
    for n in range(3):
        producer.produce(topic_name, b"v", partition=1, timestamp=now)
    producer.flush(10)
    commit(broker, group, topic_name, [1, 1])
    url = f"/api/groups/{group}/reset-offsets"
    to_offset = client.post(url, json={"topic": topic_name, "to": "offset", "value": 5, "dry_run": False})
    assert to_offset.json()["partitions"] == [{"partition": 0, "current": 1, "new": 5},
                                              {"partition": 1, "current": 1, "new": 3}]  # 3: partition 1's end
    assert committed(broker, group, topic_name, 2) == [5, 3]
    back = client.post(url, json={"topic": topic_name, "to": "duration", "value": "PT2H30M", "partitions": [0]})
    assert back.json()["partitions"] == [{"partition": 0, "current": 5, "new": 7}]  # the records of the last 2.5 h
    day = client.post(url, json={"topic": topic_name, "to": "duration", "value": "P1D", "partitions": [0]})
    assert day.json()["partitions"][0]["new"] == 0
    for body, words in (({"to": "offset", "value": -1}, "not negative"), ({"to": "offset", "value": "x"}, "whole"),
                        ({"to": "duration", "value": "1 hour"}, "not a duration"), ({"to": "duration"}, "PnDTnHnMnS")):
        bad = client.post(url, json={"topic": topic_name, "dry_run": False, **body})
        assert bad.status_code == 400 and words in bad.json()["detail"], bad.text
    assert committed(broker, group, topic_name, 2) == [5, 3]


def test_reset_several_topics_at_once(client, broker, topic_name):
    """``topics``: one plan and one commit for all of them, each row naming its topic; an unknown topic among them
    commits nothing."""
    group, other = topic_name + "-g", topic_name + "-b"
    create_topic(broker.bootstrap, topic_name, 2)
    create_topic(broker.bootstrap, other, 1)
    fill(broker, topic_name, 2, 5)
    fill(broker, other, 1, 4)
    commit(broker, group, topic_name, [5, 5])
    commit(broker, group, other, [4])
    url = f"/api/groups/{group}/reset-offsets"
    dry = client.post(url, json={"topics": [topic_name, other], "to": "shift", "value": -2})
    assert dry.status_code == 200, dry.text
    assert dry.json()["topics"] == [topic_name, other] and dry.json()["partitions"] == [
        {"topic": topic_name, "partition": 0, "current": 5, "new": 3},
        {"topic": topic_name, "partition": 1, "current": 5, "new": 3},
        {"topic": other, "partition": 0, "current": 4, "new": 2}]
    for body, status, words in (({"topics": [topic_name, "no-such-topic"]}, 404, "does not exist"),
                                ({"topics": [topic_name], "partitions": [0]}, 400, "partitions go with one topic"),
                                ({"topics": []}, 400, "give topic"), ({}, 400, "give topic"),
                                ({"topic": topic_name, "topics": [other]}, 400, "give topic")):
        bad = client.post(url, json={"to": "earliest", "dry_run": False, **body})
        assert bad.status_code == status and words in bad.json()["detail"], bad.text
    assert committed(broker, group, topic_name, 2) == [5, 5] and committed(broker, group, other, 1) == [4]
    done = client.post(url, json={"topics": [topic_name, other], "to": "earliest", "dry_run": False})
    assert done.status_code == 200, done.text
    assert committed(broker, group, topic_name, 2) == [0, 0] and committed(broker, group, other, 1) == [0]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_reset_and_delete_refused_while_the_group_has_members(client, broker, topic_name, protocol):
    group = topic_name + "-g"
    create_topic(broker.bootstrap, topic_name, 1)
    fill(broker, topic_name, 1, 5)
    consumer = Consumer(consumer_config(broker.bootstrap, group, overrides={
        "log_level": 0, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        **({"group.protocol": "consumer"} if protocol == "consumer" else {})}))
    consumer.subscribe([topic_name])
    try:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 5 and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(10, 0.5) if m.error() is None)
        assert seen == 5
        consumer.commit(asynchronous=False)
        url = f"/api/groups/{group}/reset-offsets"
        dry = client.post(url, json={"topic": topic_name, "to": "earliest"})
        assert dry.json()["active_members"] == 1 and dry.json()["partitions"] == [
            {"partition": 0, "current": 5, "new": 0}]
        refused = client.post(url, json={"topic": topic_name, "to": "earliest", "dry_run": False})
        assert refused.status_code == 409, refused.text
        assert "UNKNOWN_MEMBER_ID" in refused.json()["detail"] and "1 active member" in refused.json()["detail"]
        gone = client.delete(f"/api/groups/{group}")
        assert gone.status_code == 409 and "NON_EMPTY_GROUP" in gone.json()["detail"], gone.text
        assert committed(broker, group, topic_name, 1) == [5]
    finally:
        consumer.close()
    deleted = client.delete(f"/api/groups/{group}")
    assert deleted.status_code == 200, deleted.text
    assert committed(broker, group, topic_name, 1) == [-1001]
    again = client.delete(f"/api/groups/{group}")
    assert again.status_code == 404 and "GROUP_ID_NOT_FOUND" in again.json()["detail"]


def test_a_read_only_dashboard_user_is_refused_with_403_and_nothing_changes(tmp_path, monkeypatch):
    """The calls run with the dashboard's own credentials: a user with DESCRIBE only gets the broker's
    authorization errors (403), one line each, and the cluster is unchanged."""
    from freshet.local import BrokerProcess

    from .secured import add_users, look_only, sasl

    data = tmp_path / "data"
    add_users(data, "admin", "dash")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        conf = sasl(b.bootstrap, "admin")
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("guarded", 1)])["guarded"].result(10)
        producer = Producer(conf)
        for n in range(5):
            producer.produce("guarded", b"v")
        producer.flush(10)
        owner = Consumer({**conf, "group.id": "guarded-readers"})
        owner.commit(offsets=[TopicPartition("guarded", 0, 4)], asynchronous=False)
        owner.close()
        look_only(admin, "dash", monkeypatch)
        client = TestClient(create_app(Collector(b.bootstrap)))
        calls = [("post", "/api/topics", {"json": {"name": "sneaky"}}),
                 ("patch", "/api/topics/guarded/configs", {"json": {"set": {"retention.ms": "1"}}}),
                 ("post", "/api/topics/guarded/partitions", {"json": {"count": 3}}),
                 ("post", "/api/topics/guarded/delete-records", {"json": {"partition": 0, "before_offset": 3}}),
                 ("delete", "/api/topics/guarded?confirm=guarded", {}),
                 ("post", "/api/groups/guarded-readers/reset-offsets",
                  {"json": {"topic": "guarded", "to": "earliest", "dry_run": False}}),
                 ("delete", "/api/groups/guarded-readers", {})]
        for method, path, kwargs in calls:
            refused = getattr(client, method)(path, **kwargs)
            assert refused.status_code == 403 and "AUTHORIZATION_FAILED" in refused.json()["detail"], (path, refused.text)
        md = admin.list_topics(timeout=10)
        assert "sneaky" not in md.topics and len(md.topics["guarded"].partitions) == 1
        resource = ConfigResource(ConfigResource.Type.TOPIC, "guarded")
        assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].is_default
        reader = Consumer({**conf, "group.id": "guarded-readers"})
        try:
            assert reader.get_watermark_offsets(TopicPartition("guarded", 0), timeout=10) == (0, 5)
            assert [tp.offset for tp in reader.committed([TopicPartition("guarded", 0)], 10)] == [4]
        finally:
            reader.close()

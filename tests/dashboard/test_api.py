"""Every dashboard endpoint against a live broker (FastAPI's test client; the collector polled by hand)."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from fastapi.testclient import TestClient

from freshet.client import consumer_config
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.topics import create_topic

from .scrape import sample


@pytest.fixture(scope="module")
def loaded(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dash-events", 2, config={"retention.ms": "600000"})])["dash-events"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    base = int(time.time() * 1000) - 60_000
    for i in range(100):
        producer.produce("dash-events", b'{"n": %d}' % i, b"k%d" % i, partition=i % 2, timestamp=base + i * 100,
                         headers=[("h", b"v")])
    producer.flush(10)
    consumer = Consumer(consumer_config(broker.bootstrap, "dash-group"))
    consumer.commit(offsets=[TopicPartition("dash-events", 0, 10), TopicPartition("dash-events", 1, 20)],
                    asynchronous=False)
    consumer.close()
    collector = Collector(broker.bootstrap, lag_threshold=10)
    collector.collect()
    producer.produce("dash-events", b"more", partition=0)
    producer.flush(10)
    time.sleep(0.2)
    collector.collect()  # a second sample: rates
    return collector


@pytest.fixture
def client(loaded):
    return TestClient(create_app(loaded))


def test_overview(client, broker):
    o = client.get("/api/overview").json()
    assert o["brokers"][0]["port"] == broker.port
    assert o["topics"]["dash-events"]["partitions"] == 2 and o["topics"]["dash-events"]["messages"] == 101
    assert o["topics"]["dash-events"]["rate_in"] > 0
    assert o["groups"]["dash-group"]["total_lag"] == 71 and o["groups"]["dash-group"]["alert"] is True


def test_topic_page_and_message_browser(client):
    t = client.get("/api/topics/dash-events").json()
    assert [p["high_watermark"] for p in t["partitions"]] == [51, 50]
    assert t["configs"]["retention.ms"] == {"value": "600000", "default": False}
    newest = client.get("/api/topics/dash-events/messages?partition=1&limit=3").json()["records"]  # see test_messages.py
    assert [m["offset"] for m in newest] == [49, 48, 47]
    assert newest[2]["value"]["json"] == '{\n  "n": 95\n}' and newest[2]["key"]["text"] == "k95"
    assert client.get("/api/topics/nope").status_code == 404
    assert client.get("/api/topics/dash-events/messages?partition=9").status_code == 400


def test_groups(client):
    groups = client.get("/api/groups").json()
    assert groups["dash-group"]["state"] in ("EMPTY", "Empty")
    g = client.get("/api/groups/dash-group").json()
    assert sum(p["lag"] for p in g["partitions"]) == 71 and g["lag_history"][-1][1] == 71
    assert client.get("/api/groups/nope").status_code == 404


def test_a_groups_lag_per_partition_over_time(client):
    """The group's page charts each partition's lag a round beside the total (``loaded``'s two rounds: a record
    more in partition 0 between them)."""
    g = client.get("/api/groups/dash-group").json()
    assert [(x["topic"], x["partition"], [lag for _, lag in x["history"]]) for x in g["partition_lag_history"]] == [
        ("dash-events", 0, [40, 41]), ("dash-events", 1, [30, 30])]
    assert [at for at, _ in g["partition_lag_history"][0]["history"]] == [at for at, _ in g["lag_history"]]


def test_the_groups_lagging_most_are_charted_over_time(client, loaded):
    """The Groups tab's chart: each group's total lag a round, the ``limit`` lagging most (then by name)."""
    charted = client.get("/api/lag-history?limit=50").json()["groups"]
    assert [lag for _, lag in charted["dash-group"]] == [70, 71]
    groups = loaded.snapshot.groups
    most = sorted(groups, key=lambda g: (-groups[g]["total_lag"], g))
    assert list(client.get("/api/lag-history?limit=1").json()["groups"]) == most[:1]
    assert client.get("/api/lag-history?limit=0").status_code == 422


def test_the_partitions_lagging_most_are_charted_and_a_deleted_groups_history_goes(broker, topic_name, monkeypatch):
    from freshet.dashboard import collector as collecting
    from freshet.testing.polling import wait_for

    create_topic(broker.bootstrap, topic_name, 10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce(topic_name, b"x", partition=i % 10)
    producer.flush(10)
    group = f"{topic_name}-readers"
    consumer = Consumer(consumer_config(broker.bootstrap, group))
    consumer.commit(offsets=[TopicPartition(topic_name, p, p) for p in range(10)], asynchronous=False)  # lag 10 - p
    consumer.close()
    collector = Collector(broker.bootstrap)
    wait_for(lambda: group in collector.collect().groups, 30, "the group in a round")
    g = TestClient(create_app(collector)).get(f"/api/groups/{group}").json()
    assert [(x["partition"], x["history"][-1][1]) for x in g["partition_lag_history"]] == [(p, 10 - p) for p in range(8)]
    assert g["lag_history"][-1][1] == sum(range(1, 11))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(30)
    monkeypatch.setattr(collecting, "GONE_GROUP_S", 0.0)  # gone for any time at all: its history goes
    wait_for(lambda: group not in collector.collect().groups, 30, "the deleted group gone from a round")
    assert collector.partition_lag_history(group) == [] and group not in collector.partition_lag
    collector.stop()


def test_pipelines_and_stop_of_unknown(client):
    assert isinstance(client.get("/api/pipelines").json(), dict)
    assert client.post("/api/pipelines/nope/stop").status_code == 404
    assert client.post("/api/pipelines/nope/restart").status_code == 404


def test_metrics(client):
    text = client.get("/metrics").text
    assert sample(text, "freshet_topic_high_watermark", topic="dash-events", partition=0) == 51
    assert sample(text, "freshet_group_lag", group="dash-group", topic="dash-events", partition=0) == 41
    assert "# TYPE freshet_topic_messages_in_per_second gauge" in text


def test_page_and_static(client):
    page = client.get("/")
    assert page.status_code == 200 and "EventSource" in page.text
    assert client.get("/static/uPlot.iife.min.js").status_code == 200


def test_a_group_can_have_its_own_lag_threshold(broker, loaded):
    collector = Collector(broker.bootstrap, lag_threshold=10, group_thresholds={"dash-group": 1000})
    collector.collect()
    assert collector.snapshot.groups["dash-group"]["alert"] is False
    assert collector.snapshot.groups["dash-group"]["threshold"] == 1000


def test_token_required_when_set(loaded):
    client = TestClient(create_app(loaded, token="s3cret"))
    assert client.get("/api/overview").status_code == 401
    assert client.get("/api/overview?token=wrong").status_code == 401
    assert client.get("/api/overview?token=s3cret").status_code == 200
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_segment_count_and_size_per_partition_from_broker_metrics(broker):
    """The topic page's segment count comes from the broker's /metrics and matches the files on disk."""
    import glob
    import os

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dash-segments", 2, config={"segment.bytes": "2000"})])["dash-segments"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(60):
        producer.produce("dash-segments", b"x" * 200, partition=0)
        producer.flush(10)  # one batch each: segments roll every few batches
    producer.produce("dash-segments", b"only", partition=1)
    producer.flush(10)
    collector = Collector(broker.bootstrap, broker_metrics=[broker.metrics_url])
    collector.collect()
    t = TestClient(create_app(collector)).get("/api/topics/dash-segments").json()
    on_disk = [len(glob.glob(os.path.join(broker.data_dir, "topics", "dash-segments", str(p), "*.log")))
               for p in (0, 1)]
    assert on_disk[0] > 3 and on_disk[1] == 1
    assert [p["segments"] for p in t["partitions"]] == on_disk
    sizes = [sum(os.path.getsize(f) for f in glob.glob(os.path.join(broker.data_dir, "topics", "dash-segments",
                                                                    str(p), "*.log"))) for p in (0, 1)]
    assert [p["size_bytes"] for p in t["partitions"]] == sizes and t["size_bytes"] == sum(sizes)
    metrics = TestClient(create_app(collector)).get("/metrics").text
    assert sample(metrics, "freshet_topic_log_segments", topic="dash-segments", partition=0) == on_disk[0]


def test_without_broker_metrics_segments_are_unknown_not_wrong(loaded):
    t = TestClient(create_app(loaded)).get("/api/topics/dash-events").json()
    assert all(p["segments"] is None and p["size_bytes"] > 0 for p in t["partitions"])  # sizes: DescribeLogDirs


def test_unreachable_broker_metrics_leave_the_rest_working(broker, loaded):
    from freshet.local import free_port

    collector = Collector(broker.bootstrap, broker_metrics=[f"http://127.0.0.1:{free_port()}/metrics"])
    snap = collector.collect()
    assert snap.topics["dash-events"]["messages"] == 101
    assert snap.topics["dash-events"]["partitions"][0]["segments"] is None


def test_transactions_show_what_an_open_transaction_holds_back(broker, client):
    create_topic(broker.bootstrap, "dash-txn", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "dash-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("dash-txn", b"%d" % i, partition=0)
    producer.flush(10)
    open_ = client.get("/api/transactions").json()["dash-tx"]
    assert open_["state"] == "Ongoing"
    assert open_["partitions"] == [{"topic": "dash-txn", "partition": 0, "last_stable_offset": 0,
                                    "high_watermark": 4, "held_back": 4}]
    producer.commit_transaction(10)
    done = client.get("/api/transactions").json()["dash-tx"]
    assert done["state"] == "CompleteCommit" and done["partitions"] == []


def test_event_sourced_applications_show_event_counts_and_projection_lag(broker, tmp_path):
    import threading
    import uuid

    from freshet.eventsourcing import CommandClient, CommandProcessor, ProjectionRunner
    from freshet.eventsourcing.examples import enrollment
    from freshet.eventsourcing.examples.enrollment import Enroll, OpenCourse, Roster

    app = enrollment.app.named(f"dash-es-{uuid.uuid4().hex[:6]}")
    app.create_topics(broker.bootstrap)
    processor = CommandProcessor(app, broker.bootstrap)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    url = f"sqlite:{tmp_path / 'views.db'}"
    try:
        with CommandClient(app, broker.bootstrap) as commands:
            commands.answers([commands.send(f"course/c{c}", OpenCourse(f"C{c}", 10)) for c in range(3)])
            commands.answers([commands.send(f"course/c{i % 3}", Enroll(f"s{i}", f"N{i}")) for i in range(12)])
        runner = ProjectionRunner(app, Roster, url, broker.bootstrap)
        runner.run(until_caught_up=True, timeout_s=60)
        collector = Collector(broker.bootstrap)
        collector.collect()
        shown = TestClient(create_app(collector)).get("/api/applications").json()[app.name]
        assert shown["aggregates"] == {"course": {"events": 15, "streams": 3}}
        assert shown["events"] == 15 and shown["partitions"] == app.partitions
        roster = shown["projections"]["roster"]
        assert (roster["lag"], roster["applied"], roster["generation"]) == (0, 15, 1)  # caught up: past the markers
        with CommandClient(app, broker.bootstrap) as commands:  # five more events the projection has not read
            commands.answers([commands.send("course/c0", Enroll(f"t{i}", f"M{i}")) for i in range(5)])
        collector.collect()
        shown = TestClient(create_app(collector)).get("/api/applications").json()[app.name]
        assert shown["aggregates"]["course"] == {"events": 20, "streams": 3}
        lagging = shown["projections"]["roster"]
        assert lagging["lag"] >= 5 and len(lagging["lag_history"]) == 2
        metrics = TestClient(create_app(collector)).get("/metrics").text
        assert sample(metrics, "freshet_aggregate_events", application=app.name, aggregate="course") == 20
        runner.run(until_caught_up=True, timeout_s=60)
        runner.close()
        collector.collect()
        assert TestClient(create_app(collector)).get("/api/applications").json()[app.name]["projections"][
            "roster"]["lag"] == 0
    finally:
        processor.stop()
        thread.join(30)


def test_share_groups_with_their_backlog(broker):
    from confluent_kafka import AcknowledgeType, ShareConsumer

    from freshet.client.queue import set_group_configs

    create_topic(broker.bootstrap, "dash-queue", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce("dash-queue", b"job-%d" % i)
    producer.flush(10)
    set_group_configs(broker.bootstrap, "dash-workers", {"share.auto.offset.reset": "earliest"})
    worker = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-workers", "log_level": 3,
                            "share.acknowledgement.mode": "explicit", "max.poll.records": 10})
    worker.subscribe(["dash-queue"])
    try:
        taken = []
        deadline = time.monotonic() + 20
        while len(taken) < 10 and time.monotonic() < deadline:
            taken += worker.poll(0.5)
        for m in taken[:6]:
            worker.acknowledge(m, AcknowledgeType.ACCEPT)
        for m in taken[6:]:
            worker.acknowledge(m, AcknowledgeType.REJECT)
        worker.commit_sync(10)
        collector = Collector(broker.bootstrap, lag_threshold=10)
        collector.collect()
        client = TestClient(create_app(collector))
        o = client.get("/api/overview").json()["groups"]["dash-workers"]
        assert (o["type"], o["state"], o["members"], o["total_lag"], o["alert"]) == ("share", "Stable", 1, 20, True)
        g = client.get("/api/groups/dash-workers").json()
        assert [(p["start_offset"], p["end_offset"], p["acquired"], p["archived"], p["backlog"])
                for p in g["partitions"]] == [(10, 30, 0, 4, 20)]
        metrics = client.get("/metrics").text
        at = dict(group="dash-workers", topic="dash-queue", partition=0)
        assert sample(metrics, "freshet_share_group_backlog", **at) == 20
        assert sample(metrics, "freshet_share_group_archived_total", **at) == 4
    finally:
        worker.close()


def test_sign_in_with_a_kafka_user_on_a_secured_cluster(tmp_path, monkeypatch):
    """The dashboard reads a SASL cluster with read-only credentials of its own; a browser signs in with a Kafka
    user, checked against the cluster, and gets a session cookie."""
    from freshet.dashboard.login import COOKIE, KafkaLogin
    from freshet.local import BrokerProcess

    from .secured import add_users, look_only, sasl

    data = tmp_path / "data"
    add_users(data, "admin", "dash", "viewer")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        admin.create_topics([NewTopic("dash-secure", 1)])["dash-secure"].result(10)
        look_only(admin, "dash", monkeypatch)  # the dashboard's own user may only look
        look_only(admin, "viewer", monkeypatch)  # so may the viewer (the overview reads as them)
        for variable, value in {"FRESHET_SASL_USERNAME": "dash", "FRESHET_SASL_PASSWORD": "dash-pw"}.items():
            monkeypatch.setenv(variable, value)  # the dashboard still runs as its own user
        collector = Collector(b.bootstrap)
        collector.collect()
        client = TestClient(create_app(collector, login=KafkaLogin(b.bootstrap)))
        first = client.get("/", follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == "/login"
        assert client.get("/api/overview").status_code == 401
        wrong = client.post("/login", content="username=viewer&password=nope",
                            headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
        assert wrong.status_code == 401 and "wrong user or password" in wrong.text
        right = client.post("/login", content="username=viewer&password=viewer-pw",
                            headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
        assert right.status_code == 303 and COOKIE in right.cookies
        overview = client.get("/api/overview")
        assert overview.status_code == 200 and "dash-secure" in overview.json()["topics"]
        client.post("/logout", follow_redirects=False)
        assert client.get("/api/overview").status_code == 401

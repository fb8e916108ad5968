"""With sign-in (``--login``), what a user changes goes to the cluster with their own credentials: the cluster's
ACLs decide per user, as for any client of theirs; the dashboard's own (read-only) user is only for what every
page shows, and for requests with the token."""

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from fastapi.testclient import TestClient

from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.dashboard.login import KafkaLogin

from .secured import add_users, look_only, sasl


def signed_in(app, user: str) -> TestClient:
    client = TestClient(app)
    answer = client.post("/login", content=f"username={user}&password={user}-pw",
                         headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return client


def test_changes_are_made_as_the_signed_in_user(tmp_path, monkeypatch):
    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    add_users(data, "admin", "dash", "alice", "bob")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        admin.create_topics([NewTopic("shared", 1)])["shared"].result(10)
        grants = [AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                             AclPermissionType.ALLOW)
                  for op in (AclOperation.CREATE, AclOperation.ALTER_CONFIGS, AclOperation.WRITE,
                             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.DELETE)]
        for f in admin.create_acls(grants).values():
            f.result(10)
        look_only(admin, "dash", monkeypatch)  # the dashboard's own user may only look
        collector = Collector(b.bootstrap)
        collector.collect()
        app = create_app(collector, token="tok", login=KafkaLogin(b.bootstrap))
        alice, bob = signed_in(app, "alice"), signed_in(app, "bob")

        made = alice.post("/api/topics", json={"name": "alice-orders", "partitions": 2})
        assert made.status_code == 201, made.text
        changed = alice.patch("/api/topics/alice-orders/configs", json={"set": {"retention.ms": "60000"}})
        assert changed.status_code == 200, changed.text
        written = alice.post("/api/topics/alice-orders/messages", json={"partition": 1, "value": "hi"})
        assert written.json() == {"topic": "alice-orders", "partition": 1, "offset": 0}
        acls = alice.get("/api/security/acls", params={"principal": "User:alice"}).json()  # not hers to see
        assert acls["acls"] == [] and "none this user may see" in acls["note"]

        for call in (lambda c: c.post("/api/topics", json={"name": "bob-orders"}),
                     lambda c: c.patch("/api/topics/alice-orders/configs", json={"set": {"retention.ms": "1"}}),
                     lambda c: c.delete("/api/topics/alice-orders?confirm=alice-orders"),
                     lambda c: c.post("/api/topics/alice-orders/messages", json={"value": "sneaky"})):
            refused = call(bob)
            assert refused.status_code == 403 and "AUTHORIZATION_FAILED" in refused.json()["detail"], refused.text
            by_token = call(TestClient(app, headers={"Authorization": "Bearer tok"}))  # the dashboard's own user
            assert by_token.status_code == 403, by_token.text
        topics = admin.list_topics(timeout=10).topics
        assert "bob-orders" not in topics and len(topics["alice-orders"].partitions) == 2
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, "alice-orders")
        assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == "60000"

        alice.post("/logout", follow_redirects=False)  # signed out: the session's credentials are gone
        assert alice.post("/api/topics", json={"name": "alice-more"}).status_code == 401
        assert alice.cookies.get("freshet_session") is None


def test_the_overview_and_searches_read_as_the_signed_in_user(tmp_path, monkeypatch):
    """Signed in, a user sees the topics and groups their ACLs let them describe (overview, groups, cluster, data
    flow) and finds records only where they may READ; the dashboard's own user (DESCRIBE only) reads no records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    add_users(data, "admin", "dash", "alice")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        for f in admin.create_topics([NewTopic("alice-orders", 1), NewTopic("payroll", 1)]).values():
            f.result(10)
        producer = Producer(sasl(b.bootstrap, "admin"))
        for topic in ("alice-orders", "payroll"):
            producer.produce(topic, f"{topic}-record".encode(), b"k1")
        assert producer.flush(30) == 0
        for group in ("alice-readers", "payroll-readers"):
            committer = Consumer({**sasl(b.bootstrap, "admin"), "group.id": group})
            committer.commit(offsets=[TopicPartition("alice-orders", 0, 1)], asynchronous=False)
            committer.close()
        grants = [AclBinding(rtype, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                             AclPermissionType.ALLOW)
                  for rtype, op in ((ResourceType.TOPIC, AclOperation.READ), (ResourceType.TOPIC, AclOperation.DESCRIBE),
                                    (ResourceType.GROUP, AclOperation.DESCRIBE))]
        for f in admin.create_acls(grants).values():
            f.result(10)
        look_only(admin, "dash", monkeypatch)
        collector = Collector(b.bootstrap)
        collector.collect()
        assert {"alice-orders", "payroll"} <= set(collector.snapshot.topics)
        assert {"alice-readers", "payroll-readers"} <= set(collector.snapshot.groups)
        app = create_app(collector, token="tok", login=KafkaLogin(b.bootstrap))
        alice = signed_in(app, "alice")

        overview = alice.get("/api/overview").json()
        assert "alice-orders" in overview["topics"] and "payroll" not in overview["topics"]
        assert "alice-readers" in overview["groups"] and "payroll-readers" not in overview["groups"]
        assert set(alice.get("/api/groups").json()) == {"alice-readers"}
        assert alice.get("/api/groups/payroll-readers").status_code == 404
        assert alice.get("/api/groups/alice-readers").status_code == 200
        assert set(alice.get("/api/lag-history?limit=50").json()["groups"]) == {"alice-readers"}
        assert [t["name"] for t in alice.get("/api/cluster").json()["topics"]] == ["alice-orders"]
        flow = {n["id"] for n in alice.get("/api/dataflow").json()["nodes"]}
        assert {"topic:alice-orders", "group:alice-readers"} <= flow
        assert not flow & {"topic:payroll", "group:payroll-readers"}

        found = alice.get("/api/topics/alice-orders/messages", params={"key": "k1", "start": "oldest"})
        assert found.status_code == 200, found.text
        assert [r["value"]["text"] for r in found.json()["records"]] == ["alice-orders-record"]
        denied = alice.get("/api/topics/payroll/messages", params={"key": "k1", "start": "oldest"})
        assert denied.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in denied.json()["detail"], denied.text
        streamed = alice.get("/api/topics/payroll/messages", params={"start": "oldest", "format": "stream"})
        assert "TOPIC_AUTHORIZATION_FAILED" in streamed.text and "payroll-record" not in streamed.text

        dashboard = TestClient(app, headers={"Authorization": "Bearer tok"})  # the dashboard's own user
        assert {"alice-orders", "payroll"} <= set(dashboard.get("/api/overview").json()["topics"])
        assert {"alice-orders", "payroll"} <= {t["name"] for t in dashboard.get("/api/cluster").json()["topics"]}
        own = dashboard.get("/api/topics/alice-orders/messages", params={"start": "oldest"})
        assert own.status_code == 403, own.text  # DESCRIBE only: it reads no records


def test_share_groups_and_every_other_tab_as_the_signed_in_user(tmp_path, monkeypatch):
    """Share groups (which librdkafka's ListGroups leaves out) show to a signed-in user who may describe them;
    the Pipelines, Transactions, Clients, Applications, Ingest and Rules tabs read as them: a tab made from a
    registry they may not READ is one 403 line, a stop request is written as them (refused where they may not
    WRITE the control topic), transactions are those they may describe."""
    import json

    from confluent_kafka import Consumer, Producer, ShareConsumer

    from freshet.client.pipeline_registry import CONTROL_TOPIC, PIPELINES_TOPIC, ensure_topics
    from freshet.client.queue import set_group_configs
    from freshet.local import BrokerProcess
    from freshet.testing.polling import wait_for

    data = tmp_path / "data"
    add_users(data, "admin", "alice", "bob", "carol")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                                "FRESHET_SASL_USERNAME": "admin", "FRESHET_SASL_PASSWORD": "admin-pw"}.items():
            monkeypatch.setenv(variable, value)  # the dashboard reads as admin; the users' ACLs decide the rest
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        admin.create_topics([NewTopic("alice-jobs", 1)])["alice-jobs"].result(10)
        ensure_topics(b.bootstrap)
        producer = Producer(sasl(b.bootstrap, "admin"))
        producer.produce("alice-jobs", b"job")
        producer.produce(PIPELINES_TOPIC, json.dumps({"name": "etl", "status": "running"}).encode(), b"etl")
        assert producer.flush(30) == 0
        for txn in ("alice-tx", "payroll-tx"):
            transactional = Producer({**sasl(b.bootstrap, "admin"), "transactional.id": txn})
            transactional.init_transactions(30)
            transactional.begin_transaction()
            transactional.produce("alice-jobs", b"in a transaction")
            transactional.flush(30)  # left open: Ongoing
        for group in ("alice-share", "payroll-share"):
            set_group_configs(b.bootstrap, group, {"share.auto.offset.reset": "earliest"})
            worker = ShareConsumer({**sasl(b.bootstrap, "admin"), "group.id": group, "log_level": 3})
            worker.subscribe(["alice-jobs"])
            wait_for(lambda: any(m.error() is None for m in worker.poll(0.5)), 60, f"{group} to take a record")
            worker.close()

        def allow(user, rtype, name, pattern, *ops):
            for f in admin.create_acls([AclBinding(rtype, name, pattern, f"User:{user}", "*", op,
                                                   AclPermissionType.ALLOW) for op in ops]).values():
                f.result(10)

        prefixed, literal = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
        for user in ("alice", "bob"):
            allow(user, ResourceType.TOPIC, PIPELINES_TOPIC, literal, AclOperation.READ, AclOperation.DESCRIBE)
            allow(user, ResourceType.TOPIC, CONTROL_TOPIC, literal, AclOperation.DESCRIBE)
        allow("alice", ResourceType.TOPIC, CONTROL_TOPIC, literal, AclOperation.WRITE)
        allow("alice", ResourceType.GROUP, "alice-", prefixed, AclOperation.DESCRIBE)
        allow("alice", ResourceType.TOPIC, "alice-", prefixed, AclOperation.DESCRIBE)
        allow("alice", ResourceType.TRANSACTIONAL_ID, "alice-", prefixed, AclOperation.DESCRIBE)
        allow("alice", ResourceType.BROKER, "kafka-cluster", literal, AclOperation.DESCRIBE_CONFIGS)
        collector = Collector(b.bootstrap)
        wait_for(lambda: {"alice-share", "payroll-share"} <= set(collector.collect().groups), 60,
                 "both share groups in the dashboard's round")
        app = create_app(collector, token="tok", login=KafkaLogin(b.bootstrap))
        alice, bob, carol = (signed_in(app, user) for user in ("alice", "bob", "carol"))

        assert {"alice-share"} <= set(alice.get("/api/groups").json()) and \
            "payroll-share" not in alice.get("/api/groups").json()
        assert alice.get("/api/groups/alice-share").json()["type"] == "share"
        assert alice.get("/api/groups/payroll-share").status_code == 404
        assert "alice-share" in alice.get("/api/overview").json()["groups"]
        assert not {"alice-share", "payroll-share"} & set(carol.get("/api/groups").json())

        assert set(alice.get("/api/pipelines").json()) == {"etl"}
        assert alice.post("/api/pipelines/etl/stop").status_code == 200
        reader = Consumer({**sasl(b.bootstrap, "admin"), "group.id": "check", "auto.offset.reset": "earliest"})
        reader.subscribe([CONTROL_TOPIC])
        stops: list = []
        wait_for(lambda: stops.extend(m.value() for m in reader.consume(10, 0.5) if m.error() is None) or stops, 60,
                 "alice's stop request")
        reader.close()
        assert [json.loads(v) for v in stops] == [{"name": "etl", "action": "stop"}]
        refused = bob.post("/api/pipelines/etl/stop")  # bob may read the registry, not write the control topic
        assert refused.status_code == 403 and "AUTHORIZATION_FAILED" in refused.json()["detail"], refused.text
        for path in ("/api/pipelines", "/api/pipelines/etl/stop"):
            answer = carol.get(path) if path == "/api/pipelines" else carol.post(path)
            assert answer.status_code == 403, answer.text
            assert answer.json()["detail"] == ("cannot show the pipelines: TOPIC_AUTHORIZATION_FAILED: this user may "
                                               f"not read {PIPELINES_TOPIC}")
        assert carol.get("/api/overview").json()["pipelines"] == {}
        assert "etl" in alice.get("/api/overview").json()["pipelines"]

        assert set(alice.get("/api/transactions").json()) == {"alice-tx"}
        assert alice.get("/api/transactions").json()["alice-tx"]["state"] == "Ongoing"
        assert carol.get("/api/transactions").json() == {}
        assert alice.get("/api/clients").status_code == 200
        clients = carol.get("/api/clients")
        assert clients.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in clients.json()["detail"]
        for path in ("/api/applications", "/api/ingest", "/api/rules"):  # registries not made yet: nothing hidden
            assert carol.get(path).status_code == 200, path

        dashboard = TestClient(app, headers={"Authorization": "Bearer tok"})  # the dashboard's own user: all
        assert {"alice-share", "payroll-share"} <= set(dashboard.get("/api/groups").json())
        assert {"alice-tx", "payroll-tx"} <= set(dashboard.get("/api/transactions").json())
        assert dashboard.get("/api/pipelines").status_code == 200

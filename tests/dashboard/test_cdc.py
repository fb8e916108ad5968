"""CDC connectors in the console (issue 49): the CDC tab's API lists each connector as it announced itself in
``__freshet_cdc_state`` (database, slot, publication, tables, topics, the slot's lag in bytes, the last change's time),
and the data-flow graph draws the connector -> each topic it writes, the edge carrying that topic's produce rate;
signed in, a user sees them only with READ on ``__freshet_cdc_state``."""

import json
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from fastapi.testclient import TestClient

from freshet.cdc.postgres import CdcConfig, PostgresConnector, drop_replication_slot
from freshet.client.cdc_registry import CDC_TOPIC, cdc_record
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.dashboard.login import KafkaLogin
from freshet.testing.cdc import unique
from freshet.testing.polling import wait_for

from .secured import add_users, sasl
from .test_acting_user import signed_in


def test_a_running_connector_is_listed_with_its_slot_lag_and_drawn_into_its_topics(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.accounts (id int PRIMARY KEY, balance int)")
    slot, prefix = unique("slot"), unique("p")
    topic = f"{prefix}.{schema}.accounts"
    connector = PostgresConnector(CdcConfig(postgres.dsn, [f"{schema}.accounts"], prefix, broker.bootstrap,
                                            slot=slot, publication=unique("pub")))
    thread = threading.Thread(target=connector.run)
    thread.start()
    collector = Collector(broker.bootstrap)
    try:
        wait_for(lambda: (collector.collect().cdc.get(slot) or {}).get("status") == "streaming", 120,
                 "the connector in the dashboard's round")
        written = iter(range(1_000_000))

        def flowing() -> bool:  # rows change between two rounds: the edge's rate is the topic's produce rate
            cur.execute(f"INSERT INTO {schema}.accounts SELECT g, 1 FROM generate_series(%s, %s) g",
                        (next(written) * 100, next(written) * 100 + 49))
            snap = collector.collect()
            return (snap.topics.get(topic) or {}).get("rate_in", 0) > 0 and slot in snap.cdc

        wait_for(flowing, 120, f"{topic} written while the collector watches", interval=0.3)
        app = TestClient(create_app(collector))
        listed = app.get("/api/cdc").json()[slot]
        assert listed["database"]["dbname"] == postgres.database and listed["slot"] == slot
        assert listed["tables"] == [f"{schema}.accounts"] and listed["topics"] == [topic]
        assert isinstance(listed["slot_lag_bytes"], int) and listed["stale"] is False
        assert listed["lag_history"] and all(len(sample) == 2 for sample in listed["lag_history"])
        graph = app.get("/api/dataflow").json()
        node = next(n for n in graph["nodes"] if n["id"] == f"cdc:{slot}")
        assert node["kind"] == "cdc" and node["link"] == {"tab": "cdc", "connector": slot}
        assert f"127.0.0.1/{postgres.database}" in node["label"] and "slot lag" in node["label"]
        edge = next(e for e in graph["edges"] if e["from"] == f"cdc:{slot}")
        assert edge["to"] == f"topic:{topic}"
        assert edge["rate"] == collector.snapshot.topics[topic]["rate_in"] > 0
    finally:
        connector.stop()
        thread.join(60)
    wait_for(lambda: slot not in collector.collect().cdc, 60, "the connector gone after its clean stop")
    assert not any(n["id"] == f"cdc:{slot}" for n in TestClient(create_app(collector)).get("/api/dataflow")
                   .json()["nodes"])
    collector.stop()
    drop_replication_slot(postgres.dsn, slot)


def test_a_signed_in_user_sees_connectors_only_with_read_on_the_registry(tmp_path, monkeypatch):
    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    add_users(data, "admin", "reader", "other")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                                "FRESHET_SASL_USERNAME": "admin", "FRESHET_SASL_PASSWORD": "admin-pw"}.items():
            monkeypatch.setenv(variable, value)  # the dashboard reads as admin; the users' ACLs decide the rest
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        for f in admin.create_topics([NewTopic(CDC_TOPIC, 1, config={"cleanup.policy": "compact"}),
                                      NewTopic("pg.public.orders", 1), NewTopic("pg.public.payroll", 1)]).values():
            f.result(10)
        producer = Producer(sasl(b.bootstrap, "admin"))
        producer.produce(CDC_TOPIC, *reversed(cdc_record("shop", {
            "connector": "postgresql", "database": {"host": "db", "port": 5432, "dbname": "shop", "user": "cdc"},
            "slot": "shop", "publication": "shop_pub", "tables": ["public.orders", "public.payroll"],
            "topic_prefix": "pg", "topics": ["pg.public.orders", "pg.public.payroll"], "status": "streaming",
            "slot_lag_bytes": 4096, "last_change_ms": None, "changes": 0, "snapshot_rows": 0,
            "updated_ms": int(time.time() * 1000)})))
        producer.produce(CDC_TOPIC, b'{"snapshot_complete": true, "tables": ["public.orders"]}', b"shop")  # the slot's
        assert producer.flush(30) == 0  # snapshot state, in the same topic: neither a connector nor undecodable
        grants = [AclBinding(ResourceType.TOPIC, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
                  for user, name, pattern in (("reader", CDC_TOPIC, ResourcePatternType.LITERAL),
                                              ("reader", "pg.public.orders", ResourcePatternType.LITERAL),
                                              ("other", "pg.public.orders", ResourcePatternType.LITERAL))
                  for op in (AclOperation.READ, AclOperation.DESCRIBE)]
        for f in admin.create_acls(grants).values():
            f.result(10)
        collector = Collector(b.bootstrap)
        assert "shop" in collector.collect().cdc
        app = create_app(collector, token="tok", login=KafkaLogin(b.bootstrap))
        reader, other = signed_in(app, "reader"), signed_in(app, "other")

        listed = reader.get("/api/cdc")
        assert listed.status_code == 200, listed.text
        assert listed.json()["shop"]["topics"] == ["pg.public.orders"]  # payroll: not in the reader's Metadata
        assert listed.json()["shop"]["slot_lag_bytes"] == 4096
        flow = reader.get("/api/dataflow").json()
        assert {"from": "cdc:shop", "to": "topic:pg.public.orders"} in [
            {"from": e["from"], "to": e["to"]} for e in flow["edges"]]
        assert "topic:pg.public.payroll" not in {n["id"] for n in flow["nodes"]}

        refused = other.get("/api/cdc")
        assert refused.status_code == 403 and CDC_TOPIC in refused.json()["detail"], refused.text
        nodes = {n["id"] for n in other.get("/api/dataflow").json()["nodes"]}
        assert "topic:pg.public.orders" in nodes and "cdc:shop" not in nodes
        by_token = TestClient(app, headers={"Authorization": "Bearer tok"})
        everything = by_token.get("/api/cdc").json()
        assert list(everything) == ["shop"]
        assert json.dumps(everything["shop"]["topics"]) == '["pg.public.orders", "pg.public.payroll"]'
        assert by_token.get("/api/undecodable").json() == {}
        collector.stop()


def test_the_cdc_tab_and_the_data_flow_graph_in_a_browser(broker, page, tmp_path):
    """Chromium: the CDC tab lists a connector (announcing itself every second, as one does every 2 s) with its slot
    lag, and charts the lag over time from the dashboard's memory (a page opened later sees the earlier samples);
    the data-flow graph draws it -> its topic; its tombstone takes it off the page."""
    from freshet.client.admin import TopicAdmin
    from freshet.testing.topics import create_topic

    from .test_browser import open_dashboard, start_dashboard, wait_for_series

    name = unique("browser_slot")
    topic = f"{name}.public.orders"
    create_topic(broker.bootstrap, topic, 1)
    TopicAdmin(broker.bootstrap).ensure_topic(CDC_TOPIC, 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    lag, quiet = [4096], threading.Event()

    def announcing() -> None:
        while not quiet.is_set():
            producer.produce(CDC_TOPIC, *reversed(cdc_record(name, {
                "connector": "postgresql", "database": {"host": "db.example", "port": 5432, "dbname": "shop",
                                                        "user": "cdc"},
                "slot": name, "publication": "pub", "tables": ["public.orders"], "topic_prefix": name,
                "topics": [topic], "status": "streaming", "slot_lag_bytes": lag[0],
                "last_change_ms": int(time.time() * 1000), "changes": 3, "snapshot_rows": 10,
                "updated_ms": int(time.time() * 1000)})))
            producer.flush(30)
            quiet.wait(1.0)

    announcer = threading.Thread(target=announcing, daemon=True)
    announcer.start()
    dash, port = start_dashboard(broker.bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='cdc']")
        row = f"#cdc-list tr.cdc-connector[data-name='{name}']"
        page.wait_for_selector(row, timeout=30_000)
        assert page.inner_text(f"{row} td.slot-lag") == "4.0 KiB"
        text = page.inner_text(row)
        assert "cdc@db.example:5432/shop" in text and topic in text and "streaming" in text
        wait_for_series(page, "cdc-chart", name, lambda values: 4096 in values)
        lag[0] = 8192  # the slot falls behind: the line rises
        page.wait_for_selector(f"{row} td.slot-lag:text('8.0 KiB')", timeout=30_000)
        wait_for_series(page, "cdc-chart", name, lambda values: values[-1] == 8192)
        page.screenshot(path=str(tmp_path / "dashboard-cdc.png"))
        page.reload()  # the history is the dashboard's, not the page's: a page opened now draws it
        page.click("nav a[data-tab='cdc']")
        samples = [v for v in wait_for_series(page, "cdc-chart", name, lambda values: 8192 in values) if v is not None]
        assert 4096 in samples and samples.index(4096) < samples.index(8192)
        page.click("nav a[data-tab='dataflow']")
        page.wait_for_selector(f".flow-node.cdc[data-id='cdc:{name}']", timeout=30_000)
        page.wait_for_selector(f".flow-edge[data-from='cdc:{name}'][data-to='topic:{topic}']", timeout=30_000)
        page.screenshot(path=str(tmp_path / "dashboard-dataflow-cdc.png"))
        page.click("nav a[data-tab='cdc']")
        quiet.set()
        announcer.join(30)
        producer.produce(CDC_TOPIC, None, cdc_record(name, None)[0])  # a clean stop's tombstone
        assert producer.flush(30) == 0
        page.wait_for_selector(row, state="detached", timeout=30_000)
    finally:
        quiet.set()
        dash.terminate()
        dash.wait(30)

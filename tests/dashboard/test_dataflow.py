"""The data-flow graph: topics and what writes and reads them, each edge with its live rate and lag. Pipelines
are planted in the registry topic as the Spark listener announces them (no Spark here); the consumer group is
real and commits while the collector watches."""

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from fastapi.testclient import TestClient

from freshet.client import consumer_config
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

from .pipelines import announce
from .test_browser import open_dashboard, start_dashboard

SOURCE, OUT, GROUP = "flow-clicks", "flow-sessions-out", "flow-readers"


def commit(bootstrap: str, offset: int) -> None:
    consumer = Consumer(consumer_config(bootstrap, GROUP, overrides={"log_level": 0}))
    try:
        consumer.commit(offsets=[TopicPartition(SOURCE, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def flowing(broker):
    create_topic(broker.bootstrap, SOURCE, 1)
    create_topic(broker.bootstrap, OUT, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(40):
        producer.produce(SOURCE, b"click-%d" % n)
    producer.flush(10)
    announce(broker.bootstrap, "flow-sessions", "running",
             ["run", "sessions", "--from", SOURCE, "--to", f"topic:{OUT}", "--trigger-seconds", "1"],
             {"input_rows_per_second": 120.5, "processed_rows_per_second": 130.0})
    announce(broker.bootstrap, "flow-archive", "stopped", ["run", "access_logs", f"--from={SOURCE}",
                                                           "--to", "parquet:/tmp/flow-archive"], {})
    commit(broker.bootstrap, 25)
    return broker.bootstrap


def test_the_graph_has_each_reader_and_writer_with_rates_and_lag(flowing):
    collector = Collector(flowing)
    client = TestClient(create_app(collector))
    commit(flowing, 5)
    collector.collect()
    commit(flowing, 25)
    collector.collect()
    graph = client.get("/api/dataflow").json()
    nodes = {n["id"]: n for n in graph["nodes"]}
    edges = {(e["from"], e["to"]): e for e in graph["edges"]}
    assert nodes[f"topic:{SOURCE}"]["link"] == {"tab": "topic", "topic": SOURCE}
    assert nodes["pipeline:flow-sessions"]["label"] == "flow-sessions (running)"
    assert not any(n.startswith("topic:__") for n in nodes)  # internal topics stay out
    assert edges[(f"topic:{SOURCE}", "pipeline:flow-sessions")]["rate"] == 120.5
    assert (f"pipeline:flow-sessions", f"topic:{OUT}") in edges
    assert edges[(f"topic:{SOURCE}", "pipeline:flow-archive")]["rate"] == 0.0  # stopped
    assert nodes["sink:parquet:/tmp/flow-archive"]["kind"] == "sink"
    assert ("pipeline:flow-archive", "sink:parquet:/tmp/flow-archive") in edges
    read = edges[(f"topic:{SOURCE}", f"group:{GROUP}")]
    assert read["lag"] == 40 - 25 and read["rate"] > 0  # 20 records committed between the two rounds


def test_sql_sources_are_the_catalog_names_after_from_and_join():
    from freshet.dashboard.dataflow import sql_sources

    sources = {"clicks": {}, "users": {}, "pages": {}}
    statement = ("CREATE STREAM e AS SELECT c.*, EXTRACT(HOUR FROM ts) h FROM `Clicks` c -- FROM pages\n"
                 "JOIN users u ON c.u = u.id WHERE c.p <> 'x FROM pages' AND c.s IN (SELECT s FROM clicks)")
    assert sql_sources(statement, sources) == ["clicks", "users"]  # once each; not in a comment or a string


def test_sql_persistent_queries_are_nodes_with_their_input_and_output_topics(own_broker):
    """A CSAS joining a stream and a table and a terminated CTAS, stored by freshet sql's own catalog code, and
    the running one's progress as the runner's reporter announces it under the query's id. A broker of its own:
    the catalog it writes holds a query marked running, which `freshet sql --serve` on a shared broker would try
    to start again."""
    broker = own_broker
    from freshet.sql.catalog import Catalog, Definition

    clicks, users, enriched, counts = "sqlflow-clicks", "sqlflow-users", "sqlflow-enriched", "sqlflow-counts"
    for name in (clicks, users, enriched, counts):
        create_topic(broker.bootstrap, name, 1)
    catalog = Catalog(broker.bootstrap)
    catalog.put(Definition("stream", "flow_clicks", clicks, "json"))
    catalog.put(Definition("table", "flow_users", users, "json", key="id"))
    catalog.put(Definition("stream", "flow_enriched", enriched, "json"))
    running, stopped = "CSAS_FLOW_ENRICHED_1", "CTAS_FLOW_COUNTS_1"
    catalog.put_query(running, {
        "id": running, "kind": "stream", "sink": "flow_enriched", "topic": enriched, "status": "RUNNING",
        "sql": "CREATE STREAM flow_enriched AS SELECT c.page, u.name FROM flow_clicks c "
               "JOIN flow_users u ON c.user_id = u.id EMIT CHANGES"})
    catalog.put_query(stopped, {
        "id": stopped, "kind": "table", "sink": "flow_counts", "topic": counts, "status": "TERMINATED",
        "sql": "CREATE TABLE flow_counts AS SELECT page, count(*) AS n FROM flow_clicks GROUP BY page"})
    announce(broker.bootstrap, running, "running", None, {"input_rows_per_second": 80.0})
    collector = Collector(broker.bootstrap)
    client = TestClient(create_app(collector))

    seen = {}

    def graph() -> bool:
        collector.collect()
        seen["graph"] = client.get("/api/dataflow").json()
        return f"sql:{stopped}" in {n["id"] for n in seen["graph"]["nodes"]}

    wait_for(graph, 60, "the SQL queries in the graph")
    found = seen["graph"]
    nodes = {n["id"]: n for n in found["nodes"]}
    edges = {(e["from"], e["to"]): e for e in found["edges"]}
    assert nodes[f"sql:{running}"] == {"id": f"sql:{running}", "kind": "sql", "label": f"{running} (running)",
                                       "link": {"tab": "pipelines", "pipeline": running}}
    assert f"pipeline:{running}" not in nodes  # the reporter's entry is the query's node, not a second one
    assert edges[(f"topic:{clicks}", f"sql:{running}")]["rate"] == 40.0  # 80 rows/s over its two inputs
    assert edges[(f"topic:{users}", f"sql:{running}")]["rate"] == 40.0
    assert (f"sql:{running}", f"topic:{enriched}") in edges
    assert nodes[f"sql:{stopped}"]["label"] == f"{stopped} (terminated)"
    assert edges[(f"topic:{clicks}", f"sql:{stopped}")]["rate"] == 0.0
    assert edges[(f"sql:{stopped}", f"topic:{counts}")]["rate"] == 0.0
    assert not any(e["from"] == f"topic:{users}" and e["to"] == f"sql:{stopped}" for e in found["edges"])
    collector.stop()


def test_the_data_flow_tab_draws_the_graph_and_links_to_each_page(flowing, page, tmp_path):
    dash, port = start_dashboard(flowing)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab=dataflow]")
        page.wait_for_selector(".flow-node[data-id='pipeline:flow-sessions']", timeout=30_000)
        edge = page.locator(f".flow-edge[data-from='topic:{SOURCE}'][data-to='pipeline:flow-sessions']")
        assert float(edge.get_attribute("data-rate")) == 120.5 and "120.5/s" in edge.text_content()
        wait_for(lambda: page.locator(f".flow-edge[data-to='group:{GROUP}']").count() == 1, 30, "the group's edge")
        page.screenshot(path=str(tmp_path / "console-dataflow.png"), full_page=True)
        page.click(f".flow-node[data-id='topic:{OUT}']")
        page.wait_for_selector(f"#topic-title:has-text('topic {OUT}')", timeout=30_000)
    finally:
        dash.terminate()
        dash.wait(30)


def test_a_webhook_sink_is_drawn_as_one_with_its_dead_letter_topic():
    """``freshet webhook``'s consumer group (its default name) is a webhook node: the topic's edge in carries the
    group's commit rate and lag, an edge out goes to the dead-letter topic with that topic's produce rate."""
    import inspect

    from freshet.dashboard.collector import Snapshot
    from freshet.dashboard.dataflow import WEBHOOK_GROUP, graph
    from freshet.ingest import webhook

    assert f'f"{WEBHOOK_GROUP}{{settings.topic}}"' in inspect.getsource(webhook.WebhookSink)  # the sink's default
    snap = Snapshot(topics={"orders": {"rate_in": 3.0}, "orders.dead-letter": {"rate_in": 0.5}},
                    groups={f"{WEBHOOK_GROUP}orders": {"type": "classic", "rates": {"orders": 2.0}, "partitions": [
                        {"topic": "orders", "partition": 0, "lag": 4}]},
                            "plain": {"type": "classic", "rates": {}, "partitions": []}})
    g = graph(snap)
    nodes = {n["id"]: n for n in g["nodes"]}
    assert nodes[f"group:{WEBHOOK_GROUP}orders"]["kind"] == "webhook"
    assert nodes[f"group:{WEBHOOK_GROUP}orders"]["label"] == "webhook of orders"
    assert nodes["group:plain"]["kind"] == "group"
    edges = {(e["from"], e["to"]): (e["rate"], e["lag"]) for e in g["edges"]}
    assert edges[("topic:orders", f"group:{WEBHOOK_GROUP}orders")] == (2.0, 4)
    assert edges[(f"group:{WEBHOOK_GROUP}orders", "topic:orders.dead-letter")] == (0.5, None)

"""The data-flow graph: topics and what writes and reads them, each edge with its live rate and lag. Pipelines
are planted in the registry topic as the Spark listener announces them (no Spark here); the consumer group is
real and commits while the collector watches."""

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from fastapi.testclient import TestClient

from freshet.client import consumer_config
from freshet.client.pipeline_registry import PIPELINES_TOPIC, ensure_topics
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

from .test_browser import open_dashboard, page, start_dashboard  # noqa: F401 (page: the Chromium fixture)

SOURCE, OUT, GROUP = "flow-clicks", "flow-sessions-out", "flow-readers"


def announce(bootstrap: str, name: str, status: str, command: list[str], progress: dict) -> None:
    """A pipeline's registry record, as ``freshet.spark.registry.PipelineReporter.publish`` writes it."""
    ensure_topics(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap})
    value = {"name": name, "status": status, "host": "test", "updated_ms": int(time.time() * 1000),
             "progress": progress, "dataflow": [], "command": command, "engine": "local", "spark_ui": None}
    producer.produce(PIPELINES_TOPIC, json.dumps(value).encode(), name.encode())
    producer.flush(10)


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


def test_the_data_flow_tab_draws_the_graph_and_links_to_each_page(flowing, page, tmp_path):  # noqa: F811
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

"""The registry tabs decode record by record (issue 49): a registry topic holding records that do not decode (not
JSON, another shape, a key that is not UTF-8) shows every entry that decodes, and marks each other one
with its partition, offset, key and why; the dashboard's round goes on. A broker of the test's own: the registry
topics are global names that other tests on the shared broker read."""

import json

from confluent_kafka import Producer
from fastapi.testclient import TestClient

from freshet.client.application_registry import REGISTRY_TOPIC, application_record, projection_record
from freshet.client.pipeline_registry import PIPELINES_TOPIC
from freshet.client.stored import RULES_TOPIC
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.topics import create_topic

from .test_browser import open_dashboard, start_dashboard


def pipeline(name: str, status: str = "running") -> bytes:
    return json.dumps({"name": name, "status": status, "dataflow": ["orders", "totals"], "progress": {
        "batch_id": 3, "input_rows_per_second": 5.0, "processed_rows_per_second": 4.5, "batch_duration_ms": 120,
        "state_rows": 42, "late_rows_dropped": 2}}).encode()


def test_a_registry_topic_shows_what_decodes_and_marks_the_rest(own_broker, page, tmp_path):
    bootstrap = own_broker.bootstrap
    for topic in (PIPELINES_TOPIC, REGISTRY_TOPIC, RULES_TOPIC):
        create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap})
    written = [
        (PIPELINES_TOPIC, b"good", pipeline("good")),
        (PIPELINES_TOPIC, b"broken", pipeline("broken")),  # replaced below by a record that is not JSON
        (PIPELINES_TOPIC, b"broken", b"\x00\x00\x00\x00\x07\x02avro after a schema id"),
        (PIPELINES_TOPIC, b"a-list", b'["not", "an", "object"]'),
        (PIPELINES_TOPIC, b"old-shape", b'{"status": "running", "progress": 12}'),
        (PIPELINES_TOPIC, b"\xff\xfe", pipeline("bad key")),
        (PIPELINES_TOPIC, b"other", pipeline("other", "stopped")),
        (REGISTRY_TOPIC, *application_record("shop", "shop-events", "shop-commands", 2, ["Order"])),
        (REGISTRY_TOPIC, b"projection/shop/totals", b'{"positions": {"0": "far"}, "generation": 1}'),
        (REGISTRY_TOPIC, *projection_record("shop", "counts", 1, {0: 0, 1: 0}, 0, "postgresql://db")),
        (RULES_TOPIC, b"fine", json.dumps({"text": "rule fine", "added_ms": 1}).encode()),
        (RULES_TOPIC, b"truncated", b'{"text": "rule trunc'),
        (RULES_TOPIC, b"latin-1", b'{"text": "r\xe8gle"}'),
    ]
    refused = []
    for topic, key, value in written:
        producer.produce(topic, value, key, on_delivery=lambda err, _m: err and refused.append(err.str()))
    create_topic(bootstrap, "shop-events", 2)
    assert producer.flush(30) == 0 and not refused

    collector = Collector(bootstrap)
    snap = collector.collect()
    assert snap.error is None
    assert sorted(snap.pipelines) == ["good", "other"]  # what decodes shows as it is
    marks = snap.undecodable[PIPELINES_TOPIC]
    assert [(m["offset"], m["key"]) for m in marks] == [(2, "broken"), (3, "a-list"), (4, "old-shape"),
                                                         (5, "\ufffd\ufffd")]
    errors = {m["offset"]: m["error"] for m in marks}
    assert errors[2] == "framed with schema id 7 (Confluent's wire format), which no Freshet registry writes"
    assert "list, not an object" in errors[3]
    assert errors[4] == "'progress' is 12, not an object or null" and errors[5] == "the key is not UTF-8: fffe"
    assert all(m["partition"] == 0 and m["topic"] == PIPELINES_TOPIC for m in marks)
    assert list(snap.applications) == ["shop"] and list(snap.applications["shop"]["projections"]) == ["counts"]
    assert [(m["key"], m["error"]) for m in snap.undecodable[REGISTRY_TOPIC]] == \
        [("projection/shop/totals", "'positions' is not partition -> offset")]
    assert list(snap.rules["rules"]) == ["fine"]
    assert [(m["key"], m["error"]) for m in snap.undecodable[RULES_TOPIC]] == [
        ("truncated", "not JSON: Unterminated string starting at: line 1 column 10 (char 9)"),
        ("latin-1", "not UTF-8 text: byte 11 is 0xe8")]

    # the API: the tabs show what decodes, /api/undecodable marks the rest per record
    client = TestClient(create_app(collector))
    shown = client.get("/api/pipelines").json()
    assert sorted(shown) == ["good", "other"]
    # Spark's progress per pipeline, as charts: rows in and processed per second, batch duration, state, late rows
    assert [r[1] for r in shown["good"]["rates"]] == [5.0]
    assert {series: [r[1] for r in samples] for series, samples in shown["good"]["charts"].items()} == {
        "processed": [4.5], "batch_ms": [120], "state_rows": [42], "late": [2]}
    answer = client.get("/api/undecodable").json()
    assert [m["offset"] for m in answer[PIPELINES_TOPIC]] == [2, 3, 4, 5]
    assert list(client.get("/api/applications").json()) == ["shop"]

    # the page: the Pipelines tab shows the two pipelines and a line per record it cannot show (Chromium)
    dash, port = start_dashboard(bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='pipelines']")
        page.wait_for_selector("#pipelines ul.undecodable li", timeout=30_000)
        assert sorted(page.locator("#pipeline-list .pipeline").evaluate_all("ps => ps.map(p => p.dataset.name)")) == \
            ["good", "other"]
        charts = page.locator("#pipeline-list .pipeline[data-name='good'] .spark-charts .chart")
        assert charts.evaluate_all("cs => cs.map(c => c.querySelector('.u-title').textContent)") == \
            ["rows/s", "batch duration (ms)", "state rows", "late rows dropped"]
        points = charts.evaluate_all("cs => cs.map(c => Number(c.dataset.points))")  # a sample a round
        assert points[0] >= 1 and len(set(points)) == 1, points
        lines = page.locator("#pipelines ul.undecodable li")
        assert lines.evaluate_all("ls => ls.map(l => l.dataset.offset)") == ["2", "3", "4", "5"]
        assert lines.nth(3).inner_text() == (f"{PIPELINES_TOPIC} partition 0, offset 5, key \"\ufffd\ufffd\", "
                                             f"{len(pipeline('bad key'))} bytes: not shown, the key is not UTF-8: fffe")
        page.screenshot(path=str(tmp_path / "console-undecodable.png"), full_page=True)
        page.click("nav a[data-tab='rules']")
        page.wait_for_selector("#rules ul.undecodable li[data-offset='2']", timeout=30_000)
        assert page.locator("#rules ul.undecodable li").count() == 2
    finally:
        dash.terminate()
        dash.wait(30)

    # a later record that decodes takes its key's mark away; a tombstone takes the entry away
    producer.produce(PIPELINES_TOPIC, pipeline("broken", "stopped"), b"broken")
    producer.produce(PIPELINES_TOPIC, None, b"a-list")
    producer.produce(PIPELINES_TOPIC, None, b"good")
    assert producer.flush(30) == 0
    snap = collector.collect()
    assert sorted(snap.pipelines) == ["broken", "other"] and snap.pipelines["broken"]["status"] == "stopped"
    assert [m["key"] for m in snap.undecodable[PIPELINES_TOPIC]] == ["old-shape", "\ufffd\ufffd"]
    collector.stop()


def test_a_registry_topic_the_round_did_not_see_is_not_asked_for_again():
    """The collector hands each registry the topic names its round read: a registry topic not among them is empty
    without a metadata request of its own (one a registry a round was ~50 ms of every round's wait)."""
    from freshet.dashboard.registries import Registry

    nowhere = Registry("127.0.0.1:9", "__freshet_pipelines")  # no broker: a request would fail after its timeout
    assert nowhere.refresh(topics=frozenset({"orders"})) == ({}, [])

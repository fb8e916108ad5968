"""The dashboard's /metrics from a snapshot made by hand: every family with its type, every sample's name, labels
and value (no broker: the collector's snapshot is all /metrics reads)."""

from types import SimpleNamespace

from fastapi.testclient import TestClient

from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Snapshot

from .scrape import families, samples

FAMILIES = {
    "freshet_topic_high_watermark": "gauge", "freshet_topic_log_start_offset": "gauge",
    "freshet_topic_messages_in_per_second": "gauge", "freshet_topic_log_segments": "gauge",
    "freshet_topic_log_size_bytes": "gauge", "freshet_group_lag": "gauge", "freshet_share_group_backlog": "gauge",
    "freshet_share_group_in_flight": "gauge", "freshet_share_group_archived": "counter",
    "freshet_pipeline_input_rows_per_second": "gauge", "freshet_pipeline_late_rows_dropped": "gauge",
    "freshet_aggregate_events": "gauge", "freshet_projection_lag": "gauge", "freshet_ingest_records": "gauge",
    "freshet_ingest_buffered": "gauge",
}


def scrape(snapshot: Snapshot) -> tuple[dict, dict, str]:
    response = TestClient(create_app(SimpleNamespace(snapshot=snapshot, bootstrap="127.0.0.1:1"))).get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return families(response.text), samples(response.text), response.text


def test_every_family_is_declared_even_with_nothing_to_report():
    declared, values, text = scrape(Snapshot())
    assert declared == FAMILIES and values == {}
    assert "# TYPE freshet_topic_messages_in_per_second gauge" in text


def test_every_sample_with_its_labels_and_value():
    snapshot = Snapshot(
        topics={"clicks": {"rate_in": 12.5, "partitions": [
            {"partition": 0, "high_watermark": 51, "log_start_offset": 3, "segments": 2, "size_bytes": 4096},
            {"partition": 1, "high_watermark": 50, "log_start_offset": 0, "segments": None, "size_bytes": 700},
            {"partition": 2, "high_watermark": 0, "log_start_offset": 0, "segments": None, "size_bytes": None}]}},
        groups={"readers": {"type": "classic", "partitions": [{"topic": "clicks", "partition": 1, "lag": 7}]},
                "new-readers": {"type": "consumer", "partitions": [{"topic": "clicks", "partition": 0, "lag": 0}]},
                "workers": {"type": "share", "partitions": [
                    {"topic": "jobs", "partition": 0, "backlog": 20, "acquired": 3, "archived": 4}]}},
        pipelines={"rpm": {"progress": {"input_rows_per_second": 850.5, "late_rows_dropped": 2}},
                   "starting": {"progress": None}},
        ingest={"host-1": {"endpoints": {"http": {"received": 10, "delivered": 8, "failed": 1, "rejected": 0,
                                                  "dropped": 0, "malformed": 1, "buffered": 2}}}},
        applications={"enrollment": {"aggregates": {"course": {"events": 20, "streams": 3}},
                                     "projections": {"roster": {"lag": 5}}}},
    )
    declared, values, _ = scrape(snapshot)
    assert declared == FAMILIES

    def key(name, **labels):
        return name, tuple(sorted((k, str(v)) for k, v in labels.items()))

    ingest = dict(server="host-1", endpoint="http")
    assert values == {
        key("freshet_topic_messages_in_per_second", topic="clicks"): 12.5,
        key("freshet_topic_high_watermark", topic="clicks", partition=0): 51,
        key("freshet_topic_high_watermark", topic="clicks", partition=1): 50,
        key("freshet_topic_log_start_offset", topic="clicks", partition=0): 3,
        key("freshet_topic_log_start_offset", topic="clicks", partition=1): 0,
        key("freshet_topic_high_watermark", topic="clicks", partition=2): 0,
        key("freshet_topic_log_start_offset", topic="clicks", partition=2): 0,
        key("freshet_topic_log_segments", topic="clicks", partition=0): 2,  # unknown for 1 and 2: no sample
        key("freshet_topic_log_size_bytes", topic="clicks", partition=0): 4096,
        key("freshet_topic_log_size_bytes", topic="clicks", partition=1): 700,  # from DescribeLogDirs alone
        key("freshet_group_lag", group="readers", topic="clicks", partition=1): 7,
        key("freshet_group_lag", group="new-readers", topic="clicks", partition=0): 0,
        key("freshet_share_group_backlog", group="workers", topic="jobs", partition=0): 20,
        key("freshet_share_group_in_flight", group="workers", topic="jobs", partition=0): 3,
        key("freshet_share_group_archived_total", group="workers", topic="jobs", partition=0): 4,
        key("freshet_pipeline_input_rows_per_second", pipeline="rpm"): 850.5,
        key("freshet_pipeline_late_rows_dropped", pipeline="rpm"): 2,
        key("freshet_pipeline_input_rows_per_second", pipeline="starting"): 0,
        key("freshet_pipeline_late_rows_dropped", pipeline="starting"): 0,
        **{key("freshet_ingest_records", **ingest, outcome=o): n for o, n in
           [("received", 10), ("delivered", 8), ("failed", 1), ("rejected", 0), ("dropped", 0), ("malformed", 1)]},
        key("freshet_ingest_buffered", **ingest): 2,
        key("freshet_aggregate_events", application="enrollment", aggregate="course"): 20,
        key("freshet_projection_lag", application="enrollment", projection="roster"): 5,
    }


def test_label_values_are_escaped():
    """A topic name cannot hold a quote, but an ingest server's or pipeline's name is free text."""
    _, values, _ = scrape(Snapshot(pipelines={'say "hi"\\now': {"progress": {"input_rows_per_second": 1}}}))
    assert values[("freshet_pipeline_input_rows_per_second", (("pipeline", 'say "hi"\\now'),))] == 1

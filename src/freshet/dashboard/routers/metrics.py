"""``/metrics`` for Prometheus: a custom ``prometheus_client`` collector that turns the dashboard's latest
snapshot into metric families at each scrape (the snapshot is taken once, so one scrape is one moment)."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PrometheusCollector

from ..collector import Snapshot

router = APIRouter()
INGEST_OUTCOMES = ("received", "delivered", "failed", "rejected", "dropped", "malformed")
PARTITION = ["topic", "partition"]
GROUP_PARTITION = ["group", "topic", "partition"]


def _topics(snap: Snapshot) -> Iterator[Metric]:
    rate = GaugeMetricFamily("freshet_topic_messages_in_per_second", "Records appended per second, from the "
                             "change of the end offsets between two polls", labels=["topic"])
    high = GaugeMetricFamily("freshet_topic_high_watermark", "The partition's high watermark", labels=PARTITION)
    start = GaugeMetricFamily("freshet_topic_log_start_offset", "The partition's log start offset",
                              labels=PARTITION)
    segments = GaugeMetricFamily("freshet_topic_log_segments", "Segment files of the partition (from the "
                                 "broker's /metrics; absent when unknown)", labels=PARTITION)
    size = GaugeMetricFamily("freshet_topic_log_size_bytes", "Bytes of the partition's log (DescribeLogDirs, or "
                             "the broker's /metrics; absent when unknown)", labels=PARTITION)
    for name, t in sorted(snap.topics.items()):
        rate.add_metric([name], t["rate_in"])
        for p in t["partitions"]:
            labels = [name, str(p["partition"])]
            high.add_metric(labels, p["high_watermark"])
            start.add_metric(labels, p["log_start_offset"])
            if p.get("segments") is not None:
                segments.add_metric(labels, p["segments"])
            if p.get("size_bytes") is not None:
                size.add_metric(labels, p["size_bytes"])
    yield from (high, start, rate, segments, size)


def _groups(snap: Snapshot) -> Iterator[Metric]:
    lag = GaugeMetricFamily("freshet_group_lag", "End offset minus the group's committed offset "
                            "(classic and consumer groups)", labels=GROUP_PARTITION)
    backlog = GaugeMetricFamily("freshet_share_group_backlog", "Records of a share group not yet acknowledged "
                                "or archived", labels=GROUP_PARTITION)
    in_flight = GaugeMetricFamily("freshet_share_group_in_flight", "Records of a share group locked to a "
                                  "consumer", labels=GROUP_PARTITION)
    archived = CounterMetricFamily("freshet_share_group_archived", "Records a share group ever archived "
                                   "(rejected, or delivered too often)", labels=GROUP_PARTITION)
    for group_id, g in sorted(snap.groups.items()):
        for p in g["partitions"]:
            labels = [group_id, p["topic"], str(p["partition"])]
            if g.get("type") == "share":  # a queue: what is not done yet, and what is locked to consumers
                backlog.add_metric(labels, p["backlog"])
                in_flight.add_metric(labels, p["acquired"])
                archived.add_metric(labels, p["archived"])
            else:
                lag.add_metric(labels, p["lag"])
    yield from (lag, backlog, in_flight, archived)


def _pipelines(snap: Snapshot) -> Iterator[Metric]:
    rows = GaugeMetricFamily("freshet_pipeline_input_rows_per_second", "The last microbatch's input rows per "
                             "second", labels=["pipeline"])
    late = GaugeMetricFamily("freshet_pipeline_late_rows_dropped", "Rows dropped behind the watermark, as the "
                             "query's progress reports them", labels=["pipeline"])
    for name, p in sorted(snap.pipelines.items()):
        progress = p.get("progress") or {}
        rows.add_metric([name], progress.get("input_rows_per_second") or 0)
        late.add_metric([name], progress.get("late_rows_dropped") or 0)
    yield from (rows, late)


def _applications(snap: Snapshot) -> Iterator[Metric]:
    events = GaugeMetricFamily("freshet_aggregate_events", "Events stored per aggregate type of an event-sourced "
                               "application", labels=["application", "aggregate"])
    lag = GaugeMetricFamily("freshet_projection_lag", "Events a live projection has yet to apply",
                            labels=["application", "projection"])
    for name, a in sorted(snap.applications.items()):
        for type_name, counts in sorted(a["aggregates"].items()):
            events.add_metric([name, type_name], counts["events"])
        for projection, p in sorted(a["projections"].items()):
            lag.add_metric([name, projection], p["lag"])
    yield from (events, lag)


def _ingest(snap: Snapshot) -> Iterator[Metric]:
    records = GaugeMetricFamily("freshet_ingest_records", "Records an ingest endpoint has seen since its server "
                                "started, by outcome", labels=["server", "endpoint", "outcome"])
    buffered = GaugeMetricFamily("freshet_ingest_buffered", "Records an ingest endpoint handed to the log and "
                                 "not yet acknowledged", labels=["server", "endpoint"])
    for server, info in sorted(snap.ingest.items()):
        for endpoint, e in sorted(info.get("endpoints", {}).items()):
            for outcome in INGEST_OUTCOMES:
                records.add_metric([server, endpoint, outcome], e[outcome])
            buffered.add_metric([server, endpoint], e["buffered"])
    yield from (records, buffered)


class SnapshotMetrics(PrometheusCollector):
    """Every family, declared even when it has no sample yet, from one snapshot of ``collector``."""

    def __init__(self, collector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Metric]:
        snap = self.collector.snapshot
        for families in (_topics, _groups, _pipelines, _applications, _ingest):
            yield from families(snap)


def registry_for(collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotMetrics(collector))
    return registry


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_PLAIN_0_0_4)

r"""The broker's Prometheus endpoint: per-partition log figures no Kafka API reports (segment count).

Names follow what the Prometheus JMX exporter makes of Kafka's own ``kafka.log:type=Log`` MBeans
(``NumLogSegments``, ``Size``, ``LogStartOffset``, ``LogEndOffset``; its Kafka config, examples/kafka-2_0_0.yml:
``kafka.(\w+)<type=(.+), name=(.+), (.+)=(.+), (.+)=(.+)><>Value`` -> ``kafka_$1_$2_$3`` with the topic and
partition labels), so a dashboard or alert written for Kafka reads ours. Kafka has no MBean of a partition's high
watermark: ours is named as one of ``kafka.cluster:type=Partition`` would be. The per-client traffic counters
are Freshet's own (``freshet_``): Kafka's quota metrics (``byte-rate``, ``throttle-time``) are rates and
averages, not totals. Served on the broker's event loop (``GET /metrics``), so the figures are read
between requests, never while a partition is half-changed.
"""

from __future__ import annotations

import asyncio
import logging
import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .topics.registry import TopicRegistry

log = logging.getLogger(__name__)

_GAUGES = (
    ("kafka_log_log_numlogsegments", "Number of log segments of a partition", lambda p: len(p.segments)),
    ("kafka_log_log_size", "Bytes of a partition's log on disk", lambda p: p.size_bytes),
    ("kafka_log_log_logstartoffset", "First offset still in the log", lambda p: p.log_start_offset),
    ("kafka_log_log_logendoffset", "Offset the next record will get", lambda p: p.log_end_offset),
    ("kafka_cluster_partition_highwatermark", "Offset up to which records are durable and readable",
     lambda p: p.high_watermark),
)


class LogMetrics:
    """A prometheus_client collector over the topic registry."""

    def __init__(self, registry: TopicRegistry) -> None:
        self.registry = registry

    def collect(self):
        families = [GaugeMetricFamily(name, doc, labels=["topic", "partition"]) for name, doc, _ in _GAUGES]
        for topic in list(self.registry.topics.values()):
            for index, partition in enumerate(list(topic.partitions)):
                for family, (_, _, value) in zip(families, _GAUGES):
                    family.add_metric([topic.name, str(index)], value(partition))
        yield from families


def prometheus_name(name: str) -> str:
    """An OpenTelemetry metric or attribute name as Prometheus spells it (dots and dashes to underscores)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


class ClientTelemetryMetrics:
    """The latest metrics each client pushed (KIP-714), one gauge per metric name, labelled by the client
    (instance id, client.id, software, address) and the data point's own attributes (node_id, topic...)."""

    CLIENT_LABELS = ["client_instance_id", "client_id", "client_software", "client_host"]

    def __init__(self, telemetry) -> None:
        self.telemetry = telemetry

    def collect(self):
        self.telemetry.forget_silent()
        by_name: dict[str, list] = {}
        for client in list(self.telemetry.clients.values()):
            own = [str(client.client_instance_id), client.client_id, client.client_software, client.client_host]
            for point in client.points:
                attributes = {prometheus_name(k): v for k, v in point.attributes.items()
                              if prometheus_name(k) not in self.CLIENT_LABELS}
                by_name.setdefault(prometheus_name(point.name), []).append((own, attributes, point.value))
        for name, samples in sorted(by_name.items()):
            extra = sorted({k for _, attributes, _ in samples for k in attributes})
            family = GaugeMetricFamily(name, "pushed by the client (KIP-714)", labels=self.CLIENT_LABELS + extra)
            for own, attributes, value in samples:
                family.add_metric(own + [attributes.get(k, "") for k in extra], value)
            yield family


class ClientTrafficMetrics:
    """Bytes produced and fetched per client id, and the throttle time quotas imposed: what Kafka's quota
    sensors report (``kafka.server:type=Produce|Fetch,client-id=...``), as counters."""

    def __init__(self, quotas) -> None:
        self.quotas = quotas

    def collect(self):
        for source, name, doc in (
                (self.quotas.bytes_by_client, "freshet_client_bytes_total", "Bytes produced or fetched by a client id"),
                (self.quotas.throttled_ms_by_client, "freshet_client_throttle_ms_total",
                 "Throttle time imposed on a client id by its quota")):
            family = CounterMetricFamily(name, doc, labels=["client_id", "request"])
            for (kind, client_id), value in sorted(source.items()):
                family.add_metric([client_id, kind], value)
            yield family


class MetricsServer:
    """A minimal HTTP/1.1 server on the broker's loop: ``GET /metrics`` and nothing else."""

    def __init__(self, registry: TopicRegistry, host: str, port: int, telemetry=None, quotas=None) -> None:
        self.prometheus = CollectorRegistry(auto_describe=False)
        self.prometheus.register(LogMetrics(registry))
        if telemetry is not None:
            self.prometheus.register(ClientTelemetryMetrics(telemetry))
        if quotas is not None:
            self.prometheus.register(ClientTrafficMetrics(quotas))
        self.host, self.port = host, port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("broker metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = request.partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if method not in (b"GET", b"HEAD"):
                status, body, ctype = b"405 Method Not Allowed", b"only GET\n", b"text/plain"
            elif path != b"/metrics":
                status, body, ctype = b"404 Not Found", b"see /metrics\n", b"text/plain"
            else:
                status, body, ctype = b"200 OK", generate_latest(self.prometheus), CONTENT_TYPE_LATEST.encode()
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                         + (body if method != b"HEAD" else b""))
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a client that sends no complete request gets nothing
        finally:
            writer.close()

"""Client telemetry (KIP-714): clients push their own metrics to the broker.

Off unless the broker is started with ``--telemetry-push-interval-ms`` (Kafka too offers it only with a
metrics plugin configured). A client that sees GetTelemetrySubscriptions in ApiVersions asks for its subscription: the broker gives it
an instance id (if it has none), the metric name prefixes it wants (``org.apache.kafka.``: every standard
producer and consumer metric), the push interval and the compression types it accepts. The client then
sends PushTelemetry every interval with an OTLP ``MetricsData`` protobuf, and once more when it closes
(``terminating``). The broker keeps the latest values per client and serves them on its Prometheus
endpoint, so request latency, queue sizes, throttling and rebalances of every client show up without an
agent beside each application.

As Kafka's ``ClientMetricsManager``: a push under another subscription id is UNKNOWN_SUBSCRIPTION_ID (the
client asks again), one sooner than the interval THROTTLING_QUOTA_EXCEEDED, one larger than
``telemetry_max_bytes`` TELEMETRY_TOO_LARGE, an unaccepted codec UNSUPPORTED_COMPRESSION_TYPE, a payload
that does not decompress or parse INVALID_RECORD, a push after ``terminating`` INVALID_REQUEST; none of
them replaces what the client pushed before.
"""

from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from freshet.format.compression import decompress

TELEMETRY_KEYS = (71, 72)  # GetTelemetrySubscriptions, PushTelemetry
REQUESTED_METRICS = ("org.apache.kafka.",)
ACCEPTED_COMPRESSION = (4, 3, 2, 1)  # zstd, lz4, snappy, gzip (0, none, is always accepted)
ZERO = uuid.UUID(int=0)


class TelemetryError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass
class MetricPoint:
    name: str
    attributes: dict[str, str]
    value: float


@dataclass
class ClientMetrics:
    client_instance_id: uuid.UUID
    client_id: str
    client_host: str
    client_software: str = ""
    subscribed_at: float = field(default_factory=time.monotonic)
    last_push: float | None = None
    pushed_at_ms: int | None = None
    terminated: bool = False
    points: list[MetricPoint] = field(default_factory=list)

    def value(self, name: str, how=max) -> float | None:
        values = [p.value for p in self.points if p.name == name]
        return how(values) if values else None


def decode_metrics(payload: bytes) -> list[MetricPoint]:
    """The data points of an OTLP MetricsData message: gauges and sums as they are, histograms as their
    count and sum (``NAME.count``, ``NAME.sum``). Raises ValueError if the bytes are not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    data = MetricsData()
    try:
        data.ParseFromString(payload)
    except DecodeError as exc:
        raise ValueError(f"not an OTLP MetricsData message: {exc}") from None
    points = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind in ("gauge", "sum"):
                    for dp in getattr(metric, kind).data_points:
                        value = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
                        points.append(MetricPoint(metric.name, _attributes(dp.attributes), value))
                elif kind == "histogram":
                    for dp in metric.histogram.data_points:
                        attributes = _attributes(dp.attributes)
                        points.append(MetricPoint(metric.name + ".count", attributes, float(dp.count)))
                        points.append(MetricPoint(metric.name + ".sum", attributes, dp.sum))
    return points


def _attributes(pairs) -> dict[str, str]:
    out = {}
    for kv in pairs:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = str(getattr(v, kind)) if kind else ""
    return out


class ClientTelemetry:
    def __init__(self, push_interval_ms: int = 30_000, max_bytes: int = 1024 * 1024,
                 clock=time.monotonic) -> None:
        self.push_interval_ms = push_interval_ms
        self.max_bytes = max_bytes
        self.clock = clock
        self.clients: dict[uuid.UUID, ClientMetrics] = {}
        # the subscription's id changes when what it asks for changes (Kafka: a hash of the subscription)
        self.subscription_id = zlib.crc32(repr((REQUESTED_METRICS, push_interval_ms)).encode()) & 0x7FFFFFFF

    def subscribe(self, client_instance_id: uuid.UUID | None, client_id: str, client_host: str,
                  client_software: str) -> dict:
        self.forget_silent()
        if client_instance_id is None or client_instance_id == ZERO:
            client_instance_id = uuid.uuid4()  # the broker names a new client instance
        client = self.clients.get(client_instance_id)
        if client is None or client.terminated:
            client = self.clients[client_instance_id] = ClientMetrics(client_instance_id, client_id, client_host,
                                                                      client_software)
        client.subscribed_at = self.clock()
        return {"client_instance_id": client_instance_id, "subscription_id": self.subscription_id,
                "accepted_compression_types": list(ACCEPTED_COMPRESSION), "push_interval": self.push_interval_ms,
                "telemetry_max_bytes": self.max_bytes, "delta_temporality": False,
                "requested_metrics": list(REQUESTED_METRICS)}

    def push(self, client_instance_id: uuid.UUID | None, subscription_id: int, terminating: bool,
             compression_type: int, payload: bytes, client_id: str, client_host: str) -> None:
        """Keep a client's pushed metrics; raises TelemetryError with Kafka's code, keeping what it had."""
        if client_instance_id is None or client_instance_id == ZERO:
            raise TelemetryError(ErrorCode.invalid_request, "a client instance id is required")
        if subscription_id != self.subscription_id:
            raise TelemetryError(ErrorCode.unknown_subscription_id,
                                 f"subscription {subscription_id} is not the current one")
        client = self.clients.get(client_instance_id)
        if client is None:  # the broker restarted or forgot it: its subscription id still matches
            client = self.clients[client_instance_id] = ClientMetrics(client_instance_id, client_id, client_host)
        if client.terminated:
            raise TelemetryError(ErrorCode.invalid_request, "the client already sent its terminating push")
        now = self.clock()
        # a push may come a little early (clients jitter the interval); twice as often is too often
        if not terminating and client.last_push is not None and \
                (now - client.last_push) * 1000 < self.push_interval_ms / 2:
            raise TelemetryError(ErrorCode.throttling_quota_exceeded, "pushed sooner than the push interval")
        if len(payload) > self.max_bytes:
            raise TelemetryError(ErrorCode.telemetry_too_large,
                                 f"{len(payload)} bytes is more than telemetry_max_bytes {self.max_bytes}")
        if compression_type != 0 and compression_type not in ACCEPTED_COMPRESSION:
            raise TelemetryError(ErrorCode.unsupported_compression_type,
                                 f"compression type {compression_type} is not accepted")
        try:
            points = decode_metrics(bytes(decompress(compression_type, payload)))
        except ValueError as exc:  # a corrupt payload, or not OTLP metrics
            raise TelemetryError(ErrorCode.invalid_record, f"the metrics payload is unreadable: {exc}") from None
        client.client_id, client.client_host = client_id, client_host
        client.points = points
        client.last_push = now
        client.pushed_at_ms = int(time.time() * 1000)
        client.terminated = terminating

    def forget_silent(self) -> None:
        """Clients that neither pushed nor subscribed for three intervals (and terminated ones, after one)."""
        now = self.clock()
        for key, client in list(self.clients.items()):
            last = max(client.last_push or 0.0, client.subscribed_at)
            limit = self.push_interval_ms / 1000 * (1 if client.terminated else 3)
            if now - last > limit:
                del self.clients[key]

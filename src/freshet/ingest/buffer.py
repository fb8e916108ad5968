"""The bounded buffer between the senders and the log, and what each endpoint does when it is full.

Every endpoint of the ingest server hands its records to one ``LogBuffer``: one idempotent, acks=all
producer, with at most ``max_buffered`` records handed over and not yet acknowledged by the log. When the
log is slow or down that number climbs; at the bound each endpoint applies its policy:

``reject``  answer at once: HTTP 429 Too Many Requests (503 Service Unavailable when the log is
            unreachable), with Retry-After. Nothing is taken, so nothing acknowledged can be lost.
``wait``    hold the request up to ``wait_s`` for room, then answer as ``reject`` does.
``block``   stop reading the connection (TCP syslog): the sender's TCP window fills and it waits.
``drop``    drop the record and count it (UDP: a datagram cannot be told to come back later).

An HTTP answer that carries an offset is sent only after the log acknowledged the record (fsync'd under
acks=all), so a 200 means the record is in the log.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer

from freshet.client import producer_config

POLICIES = ("reject", "wait", "block", "drop")


@dataclass
class EndpointStats:
    """What one endpoint took in and what became of it. ``received`` is counted by the endpoint's own
    thread, ``delivered`` and ``failed`` by the producer's poll thread: one writer each, no lock."""

    name: str
    protocol: str
    address: str
    topic: str | None
    policy: str
    received: int = 0  # records handed to the log
    delivered: int = 0  # acknowledged by the log
    failed: int = 0  # refused by the log, or not delivered within message.timeout.ms
    rejected: int = 0  # records refused with "retry later" because the buffer was full
    dropped: int = 0  # records dropped because the buffer was full (UDP, or TCP with policy drop)
    malformed: int = 0  # bad input: refused (HTTP 4xx), unparsable syslog kept as "unparsed", bad StatsD lines
    extra: dict = field(default_factory=dict)  # protocol-specific figures (kernel drops, connections)

    @property
    def buffered(self) -> int:
        return self.received - self.delivered - self.failed

    def report(self, err, msg) -> None:  # the delivery callback of a record that needs nothing else
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1

    def as_dict(self) -> dict:
        return {"name": self.name, "protocol": self.protocol, "address": self.address, "topic": self.topic,
                "policy": self.policy, "received": self.received, "delivered": self.delivered,
                "failed": self.failed, "rejected": self.rejected, "dropped": self.dropped,
                "malformed": self.malformed, "buffered": self.buffered, **self.extra}


class LogBuffer:
    """One producer shared by every endpoint, bounded to ``max_buffered`` unacknowledged records."""

    def __init__(self, bootstrap: str, max_buffered: int = 100_000, producer_overrides: dict | None = None) -> None:
        if max_buffered < 1:
            raise ValueError("max_buffered must be at least 1")
        self.bootstrap = bootstrap
        self.max_buffered = max_buffered
        self.endpoints: dict[str, EndpointStats] = {}
        self.log_reachable = True
        self._last_delivery = time.monotonic()
        self.producer = Producer(producer_config(bootstrap, {
            "linger.ms": 5,
            # librdkafka's own queue holds more than our bound, so the bound (not a BufferError) decides
            "queue.buffering.max.messages": max(max_buffered * 2, 100_000),
            "queue.buffering.max.kbytes": 1024 * 1024,
            "error_cb": self._on_error, "log_level": 0, **(producer_overrides or {})}))
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True, name="ingest-delivery-reports")
        self._poller.start()

    def endpoint(self, name: str, protocol: str, address: str, topic: str | None, policy: str) -> EndpointStats:
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
        stats = self.endpoints[name] = EndpointStats(name, protocol, address, topic, policy)
        return stats

    @property
    def buffered(self) -> int:
        return sum(e.received - e.delivered - e.failed for e in self.endpoints.values())

    def has_room(self, records: int = 1) -> bool:
        return self.buffered + records <= self.max_buffered

    def retry_after_s(self) -> int:
        """What a refused sender is told: longer when the log is unreachable than when it is only busy."""
        return 5 if not self.log_reachable else 1

    def produce(self, stats: EndpointStats, topic: str, value: bytes | None, key: bytes | None = None,
                partition: int = -1, headers: list | None = None, timestamp_ms: int = 0, on_delivery=None) -> None:
        """Hand one record to the producer. Raises BufferError when librdkafka's own queue is full."""
        kwargs = {}
        if headers:
            kwargs["headers"] = headers
        if timestamp_ms:
            kwargs["timestamp"] = timestamp_ms
        self.producer.produce(topic, value, key, partition, on_delivery or stats.report, **kwargs)
        stats.received += 1

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.log_reachable = False

    def _poll(self) -> None:
        """Serve delivery reports; while the log is unreachable, learn it is back from a delivery, or from a
        metadata request every two seconds (librdkafka reports brokers going down, not coming back)."""
        probed = 0.0
        while not self._stop.is_set():
            delivered = sum(e.delivered for e in list(self.endpoints.values()))
            self.producer.poll(0.05)
            if self.log_reachable:
                continue
            if sum(e.delivered for e in list(self.endpoints.values())) > delivered:
                self.log_reachable = True
            elif time.monotonic() - probed > 2.0:
                probed = time.monotonic()
                try:
                    self.producer.list_topics(timeout=1)
                    self.log_reachable = True
                except KafkaException:
                    pass

    def close(self, timeout_s: float = 10.0) -> int:
        """Stop polling and flush: the number of records still not acknowledged after ``timeout_s``."""
        self._stop.set()
        self._poller.join(5)
        return self.producer.flush(timeout_s)

    def stats(self) -> dict:
        return {"max_buffered": self.max_buffered, "buffered": self.buffered, "log_reachable": self.log_reachable,
                "endpoints": {name: e.as_dict() for name, e in self.endpoints.items()}}


class TopicCatalog:
    """Which topics exist and how many partitions each has, from cluster metadata (a full listing: asking for
    one topic by name would let a cluster with auto-creation create it). Known topics are re-read every
    ``ttl_s``."""

    def __init__(self, producer: Producer, ttl_s: float = 10.0) -> None:
        self.producer = producer
        self.ttl_s = ttl_s
        self._partitions: dict[str, int] = {}
        self._read_at = 0.0
        self.cluster_id: str | None = None
        self._lock = threading.Lock()

    def cached(self, topic: str) -> int | None:
        """The partition count if known and fresh (no I/O): callers on an event loop try this first."""
        if time.monotonic() - self._read_at < self.ttl_s:
            return self._partitions.get(topic)
        return None

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count, or None if it does not exist (may read metadata: blocking). A miss
        reads the metadata again (a topic created a moment ago is found), once for all the requests that
        missed meanwhile."""
        asked = time.monotonic()
        count = self._partitions.get(topic)
        if count is not None and asked - self._read_at < self.ttl_s:
            return count
        with self._lock:
            if self._read_at < asked:
                self._refresh()
            return self._partitions.get(topic)

    def refresh(self) -> dict[str, int]:
        with self._lock:
            return self._refresh()

    def _refresh(self) -> dict[str, int]:
        md = self.producer.list_topics(timeout=5)
        self._partitions = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
        self.cluster_id = md.cluster_id
        self._read_at = time.monotonic()
        return dict(self._partitions)

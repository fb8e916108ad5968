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
# How long librdkafka holds records to batch them. An HTTP request is answered once its records are
# acknowledged, so the shared producer's linger is part of every request's latency and, with each client
# waiting for its answer, of the throughput: 8 clients of 100-record requests measured 117k records/s with
# 1 ms and 69k with 5 ms (2026-11-25). Syslog and StatsD are answered by nobody: their own producers batch more.
ANSWERED_LINGER_MS = 1
STREAM_LINGER_MS = 5


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
    # a producer of the endpoint's own (syslog, StatsD: produced from their listener's thread, reports served
    # by the poll thread), so the shared one's reports stay on the event loop
    producer: Producer | None = field(default=None, repr=False)
    _settling: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def buffered(self) -> int:
        # the shared producer's: counted, not len(producer) (its queue also holds the events its error callback
        # is served; an endpoint's own producer has none)
        self.settle()
        return self.received - self.delivered - self.failed

    def report(self, err, msg) -> None:  # the delivery callback of a record that needs nothing else
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1

    def settle(self) -> None:
        """An endpoint with a producer of its own gets delivery reports for failures only (a Python callback per
        delivered record took the GIL from its listener 100,000 times a second): what it handed over, less what
        failed and what its producer still holds, was delivered. Never counted down (it is a counter)."""
        if self.producer is not None:
            with self._settling:  # several threads settle: the larger count must win
                delivered = self.received - self.failed - len(self.producer)
                if delivered > self.delivered:
                    self.delivered = delivered

    def as_dict(self) -> dict:
        self.settle()
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
        self._connection_lost = False  # a broker's connection was lost: the poll thread asks the others
        self._overrides = producer_overrides or {}
        # the shared producer tells when the log is unreachable; HTTP answers wait on its acknowledgements
        self.producer = self._new_producer({"error_cb": self._on_error, "linger.ms": ANSWERED_LINGER_MS})
        self.producers = [self.producer]
        self.reports_on_loop = False  # serve_reports() runs: the poll thread leaves the shared producer alone
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True, name="ingest-delivery-reports")
        self._poller.start()

    def _new_producer(self, extra: dict | None = None) -> Producer:
        return Producer(producer_config(self.bootstrap, {
            "linger.ms": STREAM_LINGER_MS,
            # librdkafka's own queue holds more than our bound, so the bound (not a BufferError) decides
            "queue.buffering.max.messages": max(self.max_buffered * 2, 100_000),
            "queue.buffering.max.kbytes": 1024 * 1024,
            # held requests are answered once the log is back: librdkafka's reconnect backoff (doubling to 10 s
            # while the log refuses connections) would keep them waiting up to 10 s after it returned
            "reconnect.backoff.max.ms": 1000,
            "log_level": 0, **self._overrides, **(extra or {})}))

    def endpoint(self, name: str, protocol: str, address: str, topic: str | None, policy: str,
                 own_producer: bool = False) -> EndpointStats:
        """An endpoint's counters; ``own_producer`` for endpoints that need no per-record report (syslog,
        StatsD): they produce through ``stats.producer``, which reports failures only."""
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
        stats = self.endpoints[name] = EndpointStats(name, protocol, address, topic, policy)
        if own_producer:
            stats.producer = self._new_producer({"on_delivery": stats.report, "delivery.report.only.error": True})
            self.producers.append(stats.producer)
        return stats

    @property
    def buffered(self) -> int:
        """Records handed to the log and not yet acknowledged, every endpoint's: counted exactly for the
        shared producer (its reports are served on the event loop that counts what it hands over), by the
        producer's queue length for endpoints with their own (which carries nothing but their records)."""
        return sum(e.buffered for e in list(self.endpoints.values()))

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
        if stats.producer is not None:
            stats.producer.produce(topic, value, key, partition, **kwargs)
        else:
            self.producer.produce(topic, value, key, partition, on_delivery or stats.report, **kwargs)
        stats.received += 1

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.log_reachable = False
        elif err.code() == KafkaError._TRANSPORT:
            # one broker's connection lost: the log is unreachable only if no other broker answers (a cluster's
            # broker killed -9 while the others lead its partitions made /healthz answer 503 until a delivery)
            self._connection_lost = True

    def _poll(self) -> None:
        """Serve delivery reports; after a broker's connection was lost, ask whether any broker answers a metadata
        request; while the log is unreachable, learn it is back from a delivery, or from a metadata request every
        two seconds (librdkafka reports brokers going down, not coming back)."""
        probed = 0.0
        while not self._stop.is_set():
            endpoints = list(self.endpoints.values())
            delivered = _delivered(endpoints)
            if self.reports_on_loop:
                self._stop.wait(0.05)
            else:
                self.producer.poll(0.05)
            for producer in self.producers[1:]:
                producer.poll(0)
            if self._connection_lost:
                self._connection_lost = False
                try:
                    self.producer.list_topics(timeout=1)
                except KafkaException:
                    self.log_reachable = False
                    probed = time.monotonic()
            if self.log_reachable:
                continue
            if _delivered(endpoints) > delivered:
                self.log_reachable = True
            elif time.monotonic() - probed > 2.0:
                probed = time.monotonic()
                try:
                    self.producer.list_topics(timeout=1)
                    self.log_reachable = True
                except KafkaException:
                    pass

    async def serve_reports(self) -> None:
        """Serve the shared producer's delivery reports on the event loop that awaits them: a poll thread
        would take the GIL from the loop once per record (100 hand-overs a request), which measured slower
        than polling here every millisecond while records are in flight."""
        import asyncio

        self.reports_on_loop = True
        poll = self.producer.poll
        try:
            while True:
                poll(0)
                await asyncio.sleep(0.001 if len(self.producer) else 0.005)
        finally:
            self.reports_on_loop = False

    def close(self, timeout_s: float = 10.0) -> int:
        """Stop polling and flush: the number of records still not acknowledged after ``timeout_s``."""
        self._stop.set()
        self._poller.join(5)
        deadline = time.monotonic() + timeout_s
        return sum(p.flush(max(deadline - time.monotonic(), 0)) for p in self.producers)

    def stats(self) -> dict:
        return {"max_buffered": self.max_buffered, "buffered": self.buffered, "log_reachable": self.log_reachable,
                "endpoints": {name: e.as_dict() for name, e in self.endpoints.items()}}


def _delivered(endpoints: list[EndpointStats]) -> int:
    """Records the log acknowledged, every endpoint's (settled first: see ``EndpointStats.settle``)."""
    for e in endpoints:
        e.settle()
    return sum(e.delivered for e in endpoints)


class RoomCheck:
    """``LogBuffer.has_room()`` for one record at a time from one listener thread, cheaply: far from the bound
    the buffer is measured once per up to 1,024 records (a quarter of the room left, so that the other
    endpoints, taking records meanwhile, cannot overshoot it by more than the rest), near it on every record.
    Summing every endpoint's counters per datagram cost a syslog line ~2 µs of its ~6."""

    __slots__ = ("buffer", "budget")

    def __init__(self, buffer: LogBuffer) -> None:
        self.buffer, self.budget = buffer, 0

    def __call__(self) -> bool:
        if self.budget > 0:
            self.budget -= 1
            return True
        free = self.buffer.max_buffered - self.buffer.buffered
        if free <= 0:
            return False
        self.budget = min(free // 4, 1024) - 1
        return True


class TopicCatalog:
    """Which topics exist and how many partitions each has, from cluster metadata (a full listing: asking for
    one topic by name would let a cluster with auto-creation create it). Known topics are re-read every
    ``ttl_s``. ``reachable``: whether the log is known to answer (``LogBuffer.log_reachable``); while it is known
    not to, no metadata is asked (a lookup would wait out its timeout), the poll thread's probes tell when it is
    back."""

    def __init__(self, producer: Producer, ttl_s: float = 10.0, reachable=lambda: True) -> None:
        self.producer = producer
        self.ttl_s = ttl_s
        self.reachable = reachable
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
        if not self.reachable():
            if count is None:
                raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers are down"))
            return count  # the partitions it last said (records wait in the buffer)
        with self._lock:
            if self._read_at < asked:
                try:
                    self._refresh()
                except KafkaException:
                    if count is None:
                        raise
                    # the log is unreachable: the partitions it last said (records wait in the buffer)
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

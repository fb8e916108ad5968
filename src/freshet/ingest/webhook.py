"""``freshet webhook``: a topic's records POSTed to a URL, as services that call your URL when something
happens expect them.

- Each request carries ``X-Freshet-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (the
  scheme Stripe uses: the time is signed too, so a captured request cannot be replayed later) and
  ``Idempotency-Key: <topic>/<partition>/<offset>`` (of the first record; batches add ``-<last offset>``), so
  a receiver can drop the repeats that at-least-once delivery allows. ``verify_signature`` checks one.
- Delivery is at least once: the consumer group's offset is committed only after the receiver answered 2xx
  (or the record went to the dead-letter topic), so a crash between the two sends it again, same key.
- Failures: connection errors, timeouts, 408, 429 and 5xx are retried with exponential backoff (and a
  receiver's Retry-After); after ``max_attempts``, or at once for any other 4xx (the receiver refuses the
  record itself), the records go to the dead-letter topic with headers saying why, and the sink moves on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import time
from dataclasses import dataclass, field

import httpx
import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from freshet.client import ClientError, TopicAdmin, consumer_config, producer_config

SIGNATURE_HEADER = "X-Freshet-Signature"


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(secret: bytes, body: bytes, header: str, tolerance_s: int = 300, now: float | None = None) -> bool:
    """What a receiver runs: the header is well formed, its HMAC matches the body, its time is recent."""
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        timestamp = int(parts["t"])
        expected = sign(secret, body, timestamp)
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(expected, header)


def envelope(m: Message) -> dict:
    """A record as JSON: its value embedded as JSON when it is JSON, else as text, else base64."""
    out = {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(), "timestamp": m.timestamp()[1],
           "key": _embed(m.key()), "value": _embed(m.value())}
    if m.headers():
        out["headers"] = {k: _embed(v)["data"] if v is not None else None for k, v in m.headers()}
    return out


def _embed(data: bytes | None):
    if data is None:
        return None
    try:
        return {"type": "JSON", "data": orjson.loads(data)}
    except orjson.JSONDecodeError:
        pass
    try:
        return {"type": "STRING", "data": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"type": "BINARY", "data": base64.b64encode(data).decode()}


@dataclass
class WebhookSettings:
    bootstrap: str
    topic: str
    url: str
    secret: bytes
    group: str | None = None
    batch: int = 1  # records per request: 1 posts the envelope itself, more post {"records": [...]}
    max_attempts: int = 5
    backoff_s: float = 0.5  # first retry after this, doubling, at most max_backoff_s
    max_backoff_s: float = 30.0
    timeout_s: float = 10.0
    dead_letter_topic: str | None = None  # default: <topic>.dead-letter
    headers: dict = field(default_factory=dict)


@dataclass
class WebhookCounts:
    posted: int = 0  # requests answered 2xx
    delivered: int = 0  # records in them
    retries: int = 0
    dead_lettered: int = 0


class WebhookSink:
    def __init__(self, settings: WebhookSettings) -> None:
        if not settings.url.startswith(("http://", "https://")):
            raise ClientError(f"--url {settings.url!r}: an http:// or https:// URL")
        if settings.batch < 1 or settings.max_attempts < 1:
            raise ClientError("--batch and --max-attempts must be at least 1")
        self.s = settings
        self.dead_letter_topic = settings.dead_letter_topic or f"{settings.topic}.dead-letter"
        self.group = settings.group or f"freshet-webhook-{settings.topic}"
        self.counts = WebhookCounts()
        self._stopping = False
        admin = TopicAdmin(settings.bootstrap)
        topics = admin.list_topics()
        if settings.topic not in topics:
            raise ClientError(f"topic {settings.topic!r} does not exist")
        admin.ensure_topic(self.dead_letter_topic, topics[settings.topic], None, topics)
        self.consumer = Consumer(consumer_config(settings.bootstrap, self.group, {"log_level": 0}))
        self.producer = Producer(producer_config(settings.bootstrap, {"log_level": 0}))
        self.http = httpx.Client(timeout=settings.timeout_s)

    def stop(self) -> None:
        self._stopping = True

    def run(self, max_idle_s: float | None = None, progress=None) -> WebhookCounts:
        """Deliver until ``stop()`` (or until nothing new arrived for ``max_idle_s``)."""
        self.consumer.subscribe([self.s.topic])
        idle_since = time.monotonic()
        try:
            while not self._stopping:
                messages = self.consumer.consume(self.s.batch, 0.2)
                records = []
                for m in messages:
                    if m.error() is None:
                        records.append(m)
                    elif m.error().code() != KafkaError._PARTITION_EOF:
                        raise ClientError(f"reading {self.s.topic}: {m.error().str()}")
                if not records:
                    if max_idle_s is not None and time.monotonic() - idle_since > max_idle_s:
                        break
                    continue
                idle_since = time.monotonic()
                self._deliver(records)
                if progress is not None:
                    progress(self.counts)
        finally:
            self.consumer.close()
            self.producer.flush(10)
            self.http.close()
        return self.counts

    def _deliver(self, records: list[Message]) -> None:
        if self.s.batch == 1:
            body = orjson.dumps(envelope(records[0]))
        else:
            body = orjson.dumps({"records": [envelope(m) for m in records]})
        first, last = records[0], records[-1]
        key = f"{first.topic()}/{first.partition()}/{first.offset()}"
        if len(records) > 1:
            key += f"-{last.partition()}/{last.offset()}"
        error = None
        for attempt in range(1, self.s.max_attempts + 1):
            if self._stopping and attempt > 1:
                return  # not committed: delivered again after a restart
            now = int(time.time())
            headers = {**self.s.headers, "Content-Type": "application/json", "Idempotency-Key": key,
                       SIGNATURE_HEADER: sign(self.s.secret, body, now), "X-Freshet-Attempt": str(attempt)}
            retry_after = None
            try:
                answer = self.http.post(self.s.url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= answer.status_code < 300:
                    self.counts.posted += 1
                    self.counts.delivered += len(records)
                    self._commit(records)
                    return
                error = f"HTTP {answer.status_code}: {answer.text[:200]}"
                if not (answer.status_code in (408, 429) or answer.status_code >= 500):
                    break  # the receiver refuses these records: retrying will not help
                retry_after = _retry_after(answer.headers.get("retry-after"))
            if attempt < self.s.max_attempts:
                self.counts.retries += 1
                pause = min(self.s.backoff_s * 2 ** (attempt - 1), self.s.max_backoff_s)
                time.sleep(retry_after if retry_after is not None else pause * (0.5 + random.random() / 2))
        self._dead_letter(records, error or "failed", attempt)
        self._commit(records)

    def _dead_letter(self, records: list[Message], error: str, attempts: int) -> None:
        failures: list = []
        for m in records:
            headers = list(m.headers() or []) + [
                ("freshet.dead-letter.reason", error.encode()), ("freshet.dead-letter.url", self.s.url.encode()),
                ("freshet.dead-letter.attempts", str(attempts).encode()),
                ("freshet.dead-letter.source", f"{m.topic()}/{m.partition()}/{m.offset()}".encode())]
            self.producer.produce(self.dead_letter_topic, m.value(), m.key(), headers=headers,
                                  timestamp=max(0, m.timestamp()[1]),
                                  on_delivery=lambda err, _msg: failures.append(err) if err else None)
        if self.producer.flush(30) or failures:
            raise ClientError(f"dead-letter topic {self.dead_letter_topic}: records not acknowledged"
                              f" ({failures[0].str() if failures else 'timed out'}); nothing committed")
        self.counts.dead_lettered += len(records)

    def _commit(self, records: list[Message]) -> None:
        ends: dict[tuple[str, int], int] = {}
        for m in records:
            ends[(m.topic(), m.partition())] = max(ends.get((m.topic(), m.partition()), -1), m.offset() + 1)
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), 300.0)
    except ValueError:
        return None

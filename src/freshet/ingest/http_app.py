"""The ingest server's HTTP side (FastAPI): REST Proxy v3 and v2 produce, browser beacons with CORS,
cluster and topic listings, /metrics.

The produce routes are plain ASGI handlers inside the FastAPI app: they read the body as it arrives (v3
streaming mode answers each record while the request is still coming in) and skip per-request model
validation, which at 1,000 requests a second is most of the cost.
"""

from __future__ import annotations

import asyncio
import re
import threading
from urllib.parse import unquote
from dataclasses import dataclass

import orjson
from confluent_kafka import KafkaError, KafkaException, Message
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.routing import Route

from .buffer import EndpointStats, LogBuffer, TopicCatalog
from .rest_proxy import (
    OutgoingRecord,
    ShapeError,
    split_concatenated,
    v2_failure,
    v2_format,
    v2_records,
    v3_record,
    V3Reports,
)

JSON = b"application/json"
V2_JSON = b"application/vnd.kafka.v2+json"


@dataclass
class HttpSettings:
    policy: str = "reject"  # what the produce routes do when the buffer is full: reject or wait
    wait_s: float = 5.0  # policy wait: how long a request is held for room
    ack_timeout_s: float = 30.0  # how long a request waits for the log's acknowledgement
    max_request_bytes: int = 16 * 1024 * 1024
    max_beacon_bytes: int = 64 * 1024  # what browsers allow a beacon
    cors_origins: tuple[str, ...] = ("*",)


class ClientGone(Exception):
    pass


class Delivery:
    """The delivery reports of ``n`` records, resolved on the event loop when the last one arrives. Callbacks
    run where the producer is polled: on the event loop (``LogBuffer.serve_reports``), or on another thread
    (the poll thread before that starts, ``flush`` at the end)."""

    __slots__ = ("future", "lock", "loop", "owner", "remaining", "results", "stats")

    def __init__(self, loop: asyncio.AbstractEventLoop, stats: EndpointStats, n: int) -> None:
        # each record's report: the written Message (read when answering, not in the callback), the error
        # (KafkaError, or ShapeError for a record never handed over), or None: no report yet
        self.results: list = [None] * n
        self.remaining = n
        self.future = loop.create_future()
        self.loop = loop
        self.owner = threading.get_ident()  # the event loop's thread (made there)
        self.lock = threading.Lock()
        self.stats = stats
        if n == 0:
            self.future.set_result(None)

    def callback(self, i: int):
        def report(err, msg) -> None:
            if err is None:
                self.stats.delivered += 1
                self.results[i] = msg
            else:
                self.stats.failed += 1
                self.results[i] = err
            self._count_down()
        return report

    def settle(self, i: int, error) -> None:
        """Record ``i`` will get no delivery report (it was never handed to the producer)."""
        self.results[i] = error
        self._count_down()

    def _count_down(self) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining:
                return
        if threading.get_ident() == self.owner:  # on the loop: no wake-up through the loop's self-pipe
            _resolve(self.future)
        else:
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Ingest:
    """What the routes share: the buffer, the topic catalog, the settings and the endpoints' counters."""

    def __init__(self, buffer: LogBuffer, settings: HttpSettings, address: str) -> None:
        self.buffer = buffer
        self.settings = settings
        self.catalog = TopicCatalog(buffer.producer, reachable=lambda: buffer.log_reachable)
        self.rest = buffer.endpoint("http", "http", address, None, settings.policy)
        self.beacons = buffer.endpoint("beacon", "http", address, None, "reject")

    async def partitions(self, topic: str) -> int | None:
        count = self.catalog.cached(topic)
        if count is None:
            try:
                count = await asyncio.to_thread(self.catalog.partitions, topic)
            except KafkaException as exc:
                raise ShapeError(503, f"the log is unreachable ({exc.args[0].str()}): cannot tell whether topic"
                                      f" '{topic}' exists; retry after {self.buffer.retry_after_s()} s") from None
        return count

    @property
    def cluster_id(self) -> str:
        return self.catalog.cluster_id or "freshet"

    async def room(self, stats: EndpointStats, n: int) -> bool:
        """Whether ``n`` records may go in now (policy wait: within wait_s); counts them rejected if not."""
        if self.buffer.has_room(n):
            return True
        if stats.policy == "wait" and n <= self.buffer.max_buffered:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.settings.wait_s
            while loop.time() < deadline:
                await asyncio.sleep(0.01)
                if self.buffer.has_room(n):
                    return True
        stats.rejected += n
        return False

    def full(self) -> ShapeError:
        if not self.buffer.log_reachable:
            return ShapeError(503, f"the log is unreachable and {self.buffer.buffered} records wait for it;"
                                   f" retry after {self.buffer.retry_after_s()} s")
        return ShapeError(429, f"the ingest buffer is full ({self.buffer.buffered} of {self.buffer.max_buffered}"
                               f" records wait for the log); retry after {self.buffer.retry_after_s()} s")

    def produce(self, stats: EndpointStats, topic: str, records: list, delivery: Delivery) -> None:
        """Hand ``records`` (OutgoingRecord or ShapeError each) to the producer; errors settle at once."""
        buffer = self.buffer
        # the usual record (no headers, no timestamp) goes straight to the shared producer
        direct = buffer.producer.produce if stats.producer is None else None
        callback = delivery.callback
        for i, record in enumerate(records):
            if type(record) is not OutgoingRecord:
                delivery.settle(i, record)
                continue
            try:
                if direct is not None and record.headers is None and not record.timestamp_ms:
                    direct(topic, record.value, record.key, record.partition, callback(i))
                    stats.received += 1
                else:
                    buffer.produce(stats, topic, record.value, record.key, record.partition, record.headers,
                                   record.timestamp_ms, delivery.callback(i))
            except BufferError:
                stats.rejected += 1
                delivery.settle(i, self.full())
            except KafkaException as exc:
                delivery.settle(i, exc.args[0])

    async def delivered(self, delivery: Delivery) -> None:
        """Wait for every report of ``delivery``, at most ack_timeout_s (then the missing ones are answered 503)."""
        future = delivery.future
        if future.done():
            return
        timer = delivery.loop.call_later(self.settings.ack_timeout_s, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()

    def outcome(self, result) -> ShapeError | tuple[int, int, int]:
        """A record's fate: (partition, offset, timestamp ms), or the error to report."""
        if type(result) is Message:
            return result.partition(), result.offset(), result.timestamp()[1]
        if result is None:
            return ShapeError(503, f"not acknowledged by the log within {self.settings.ack_timeout_s:g} s;"
                                   f" it may still be written (retrying may write it twice)")
        if isinstance(result, ShapeError):
            return result
        return ShapeError(_kafka_status(result), f"{result.name()}: {result.str()}")


def _kafka_status(err: KafkaError) -> int:
    code = err.code()
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return 413
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        return 404
    if code in (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                KafkaError._TRANSPORT):
        return 503
    if code in (KafkaError.INVALID_RECORD, KafkaError.CORRUPT_MESSAGE, KafkaError.INVALID_TIMESTAMP):
        return 400
    return 500


async def read_body(receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise ShapeError(413, f"the request body exceeds {limit} bytes", 413)
        chunks.append(body)
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send, status: int, body: bytes, content_type: bytes = JSON, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _header(scope, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


def _retry_after(ingest: Ingest, error: ShapeError) -> list:
    return [(b"retry-after", str(ingest.buffer.retry_after_s()).encode())] if error.status in (429, 503) else []


async def _refuse(ingest: Ingest, send, error: ShapeError, content_type: bytes = JSON) -> None:
    await respond(send, error.status, orjson.dumps(error.body()), content_type, _retry_after(ingest, error))


class IngestRoute:
    """A plain ASGI handler of one produce route, sharing the server's ``Ingest``."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest


class V3Records(IngestRoute):
    """``POST /v3/clusters/{cluster_id}/topics/{topic_name}/records``. The cluster id is not checked (the
    REST Proxy checks it only in Confluent Cloud), so curl lines written for another cluster work."""

    async def __call__(self, scope, receive, send) -> None:
        ingest = self.ingest
        stats = ingest.rest
        topic = scope["path_params"]["topic_name"]
        content_type = (_header(scope, b"content-type") or JSON).split(b";")[0].strip().lower()
        if content_type not in (JSON, b"application/*", b"*/*"):
            stats.malformed += 1
            return await _refuse(ingest, send, ShapeError(415, f"Content-Type {content_type.decode(errors='replace')!r}:"
                                                               f" the v3 API takes application/json"))
        try:
            partitions = await ingest.partitions(topic)
        except ShapeError as exc:
            return await _refuse(ingest, send, exc)
        if partitions is None:
            stats.malformed += 1
            return await _refuse(ingest, send, ShapeError(404, f"Topic '{topic}' not found.", 40403))
        try:
            if _header(scope, b"content-length") is None:
                return await self._stream(scope, receive, send, topic, partitions)
            body = await read_body(receive, ingest.settings.max_request_bytes)
        except ClientGone:
            return
        except ShapeError as exc:
            stats.malformed += 1
            return await _refuse(ingest, send, exc)
        try:
            objects, _, tail_error = split_concatenated(body)
        except UnicodeDecodeError:
            objects, tail_error = [], ShapeError(400, "the body is not UTF-8")
        records: list = []
        for obj in objects:
            try:
                records.append(v3_record(obj, partitions))
            except ShapeError as exc:
                records.append(exc)
        if tail_error is not None:
            records.append(tail_error)
        bad = sum(isinstance(r, ShapeError) for r in records)
        stats.malformed += bad
        if not records:
            return await _refuse(ingest, send, ShapeError(400, "no record in the request body"))
        if not await ingest.room(stats, len(records) - bad):
            return await _refuse(ingest, send, ingest.full())
        delivery = Delivery(asyncio.get_running_loop(), stats, len(records))
        ingest.produce(stats, topic, records, delivery)
        await ingest.delivered(delivery)
        lines = V3Reports(ingest.cluster_id, topic)
        if len(records) == 1:
            status, report = self._report(lines, records[0], delivery.results[0])
            return await respond(send, status, report, headers=_retry_after(ingest, ShapeError(status, "")))
        written = lines.written
        await respond(send, 200, b"\n".join([
            written(r, result.partition(), result.offset(), result.timestamp()[1]) if type(result) is Message
            else self._report(lines, r, result)[1] for r, result in zip(records, delivery.results)]))

    def _report(self, lines: V3Reports, record, result) -> tuple[int, bytes]:
        """A record's error code and its line of the answer."""
        if isinstance(record, ShapeError):
            return record.code, orjson.dumps(record.body())
        outcome = self.ingest.outcome(result)
        if isinstance(outcome, ShapeError):
            return outcome.code, orjson.dumps(outcome.body())
        return 200, lines.written(record, *outcome)

    async def _stream(self, scope, receive, send, topic: str, partitions: int) -> None:
        """Streaming mode (a chunked request): each record is produced as soon as it has arrived and its
        delivery report is sent, in order, as soon as the log acknowledged it."""
        ingest = self.ingest
        stats = ingest.rest
        loop = asyncio.get_running_loop()
        reports: asyncio.Queue = asyncio.Queue()

        async def writer() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", JSON)]})
            lines = V3Reports(ingest.cluster_id, topic)
            while (item := await reports.get()) is not None:
                record, delivery = item
                if delivery is not None:
                    await ingest.delivered(delivery)
                    _, report = self._report(lines, record, delivery.results[0])
                else:
                    report = orjson.dumps(record.body())
                await send({"type": "http.response.body", "body": report + b"\n", "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        task = asyncio.create_task(writer())
        pending, size, done = "", 0, False
        try:
            while not done:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                done = not message.get("more_body")
                if size > ingest.settings.max_request_bytes:
                    stats.malformed += 1
                    await reports.put((ShapeError(413, f"the stream exceeds {ingest.settings.max_request_bytes}"
                                                       f" bytes"), None))
                    break
                pending += chunk.decode("utf-8", "replace")
                objects, pending, error = split_concatenated(pending)
                for obj in objects:
                    await self._one(obj, topic, partitions, loop, reports)
                if error is not None and (done or not error.incomplete):
                    stats.malformed += 1
                    await reports.put((error, None))
                    break
        finally:
            await reports.put(None)
            await task

    async def _one(self, obj, topic: str, partitions: int, loop, reports: asyncio.Queue) -> None:
        ingest, stats = self.ingest, self.ingest.rest
        try:
            record = v3_record(obj, partitions)
        except ShapeError as exc:
            stats.malformed += 1
            await reports.put((exc, None))
            return
        if not await ingest.room(stats, 1):
            await reports.put((ingest.full(), None))
            return
        delivery = Delivery(loop, stats, 1)
        ingest.produce(stats, topic, [record], delivery)
        await reports.put((record, delivery))


class V2Records(IngestRoute):
    """``POST /topics/{topic}`` and ``POST /topics/{topic}/partitions/{partition}`` of REST Proxy v2."""

    async def __call__(self, scope, receive, send) -> None:
        ingest = self.ingest
        stats = ingest.rest
        topic = scope["path_params"]["topic"]
        path_partition = scope["path_params"].get("partition")
        try:
            embedded = v2_format((_header(scope, b"content-type") or b"").decode("latin-1") or None)
            partitions = await ingest.partitions(topic)
            if partitions is None:
                raise ShapeError(404, "Topic not found.", 40401)
            body = await read_body(receive, ingest.settings.max_request_bytes)
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ShapeError(400, f"malformed JSON: {exc}", 400) from None
            records = v2_records(parsed, embedded, partitions, path_partition)
            del parsed, body  # not kept alive (and scanned by the collector) while the log acknowledges
        except ClientGone:
            return
        except ShapeError as exc:
            stats.malformed += exc.status != 503
            return await _refuse(ingest, send, exc, V2_JSON)
        if not await ingest.room(stats, len(records)):
            error = ingest.full()
            error.code = 42901 if error.status == 429 else 50003
            return await _refuse(ingest, send, error, V2_JSON)
        delivery = Delivery(asyncio.get_running_loop(), stats, len(records))
        ingest.produce(stats, topic, records, delivery)
        await ingest.delivered(delivery)
        offsets = []
        append = offsets.append
        for result in delivery.results:
            if type(result) is Message:  # written: the usual case, without outcome()'s tuple
                append({"partition": result.partition(), "offset": result.offset(), "error_code": None,
                        "error": None})
            else:
                append(v2_failure(ingest.outcome(result)))
        await respond(send, 200, orjson.dumps({"offsets": offsets, "key_schema_id": None, "value_schema_id": None}),
                      V2_JSON)


class Beacons(IngestRoute):
    """``POST /beacon/{topic}``: what ``navigator.sendBeacon`` sends from a page (any body up to 64 KiB,
    usually JSON as text/plain, which needs no CORS preflight). The body is the record's value as sent; the
    page's origin, the user agent and the client's address go in headers; ``?key=`` sets the key. Answered
    204 as soon as the record is buffered: a beacon's sender never reads the answer."""

    async def __call__(self, scope, receive, send) -> None:
        ingest = self.ingest
        stats = ingest.beacons
        topic = scope["path_params"]["topic"]
        try:
            partitions = await ingest.partitions(topic)
            if partitions is None:
                raise ShapeError(404, f"Topic '{topic}' not found.")
            body = await read_body(receive, ingest.settings.max_beacon_bytes)
        except ClientGone:
            return
        except ShapeError as exc:
            stats.malformed += exc.status != 503
            return await _refuse(ingest, send, exc)
        if not await ingest.room(stats, 1):
            return await _refuse(ingest, send, ingest.full())
        key = None
        for part in scope.get("query_string", b"").split(b"&"):
            if part.startswith(b"key="):
                from urllib.parse import unquote_to_bytes

                key = unquote_to_bytes(part[4:])
        headers = [("client-address", (scope.get("client") or ("",))[0].encode())]
        for name in (b"origin", b"user-agent", b"referer"):
            value = _header(scope, name)
            if value is not None:
                headers.append((name.decode(), value))
        try:
            ingest.buffer.produce(stats, topic, body, key, headers=headers)
        except BufferError:
            stats.rejected += 1
            return await _refuse(ingest, send, ingest.full())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


class _IngestMetrics:
    def __init__(self, buffer: LogBuffer) -> None:
        self.buffer = buffer

    def collect(self):
        records = CounterMetricFamily("freshet_ingest_records", "Records per endpoint and what became of them",
                                      labels=["endpoint", "protocol", "outcome"])
        buffered = GaugeMetricFamily("freshet_ingest_buffered", "Records handed to the log, not yet acknowledged",
                                     labels=["endpoint"])
        for e in list(self.buffer.endpoints.values()):
            for outcome in ("received", "delivered", "failed", "rejected", "dropped", "malformed"):
                records.add_metric([e.name, e.protocol, outcome], getattr(e, outcome))
            buffered.add_metric([e.name], e.buffered)
        yield records
        yield buffered
        yield GaugeMetricFamily("freshet_ingest_buffer_limit", "Records the buffer holds before endpoints"
                                " reject, wait, block or drop", value=self.buffer.max_buffered)
        yield GaugeMetricFamily("freshet_ingest_log_reachable", "1 while the log answers", value=int(
            self.buffer.log_reachable))
        extra = GaugeMetricFamily("freshet_ingest_endpoint", "Protocol figures per endpoint (kernel drops,"
                                  " connections)", labels=["endpoint", "figure"])
        for e in list(self.buffer.endpoints.values()):
            for figure, value in e.extra.items():
                if isinstance(value, (int, float)):
                    extra.add_metric([e.name, figure], value)
        yield extra


class ProducePaths:
    """The ASGI app uvicorn runs: a produce request from a non-browser client (no Origin header) goes straight
    to its handler; everything else through FastAPI (CORS, exception handling, the other routes). The
    middleware stack cost as much per request as producing its hundred records."""

    _V3 = re.compile(r"/v3/clusters/([^/]+)/topics/([^/]+)/records")
    _V2 = re.compile(r"/topics/([^/]+)(?:/partitions/(\d+))?")

    def __init__(self, app: FastAPI, v3: V3Records, v2: V2Records) -> None:
        self.app = app
        self.v3 = v3
        self.v2 = v2

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and _header(scope, b"origin") is None:
            path = scope["path"]
            if m := self._V3.fullmatch(path):
                scope["path_params"] = {"cluster_id": unquote(m.group(1)), "topic_name": unquote(m.group(2))}
                return await self.v3(scope, receive, send)
            if m := self._V2.fullmatch(path):
                params = {"topic": unquote(m.group(1))}
                if m.group(2) is not None:
                    params["partition"] = int(m.group(2))
                scope["path_params"] = params
                return await self.v2(scope, receive, send)
        await self.app(scope, receive, send)


def create_app(buffer: LogBuffer, settings: HttpSettings | None = None, address: str = "") -> FastAPI:
    settings = settings or HttpSettings()
    ingest = Ingest(buffer, settings, address)
    app = FastAPI(title="Freshet ingest", summary="Confluent REST Proxy compatible produce, beacons, metrics")
    app.state.ingest = ingest
    v3, v2 = V3Records(ingest), V2Records(ingest)
    app.state.produce_paths = lambda: ProducePaths(app, v3, v2)
    app.router.routes.extend([
        Route("/v3/clusters/{cluster_id}/topics/{topic_name}/records", v3, methods=["POST"]),
        Route("/topics/{topic}", v2, methods=["POST"]),
        Route("/topics/{topic}/partitions/{partition:int}", v2, methods=["POST"]),
        Route("/beacon/{topic}", Beacons(ingest), methods=["POST"]),
    ])
    app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                       allow_headers=["*"], max_age=600)
    registry = CollectorRegistry()
    registry.register(_IngestMetrics(buffer))

    def cluster() -> dict:
        cid = ingest.cluster_id
        return {"kind": "KafkaCluster", "metadata": {"self": f"/v3/clusters/{cid}"}, "cluster_id": cid}

    @app.get("/v3/clusters")
    async def clusters() -> dict:
        await asyncio.to_thread(ingest.catalog.refresh)
        return {"kind": "KafkaClusterList", "metadata": {"self": "/v3/clusters"}, "data": [cluster()]}

    @app.get("/v3/clusters/{cluster_id}")
    async def one_cluster(cluster_id: str) -> dict:
        await asyncio.to_thread(ingest.catalog.refresh)
        return cluster()

    @app.get("/v3/clusters/{cluster_id}/topics")
    async def v3_topics(cluster_id: str) -> dict:
        topics = await asyncio.to_thread(ingest.catalog.refresh)
        return {"kind": "KafkaTopicList", "metadata": {"self": f"/v3/clusters/{cluster_id}/topics"},
                "data": [{"kind": "KafkaTopic", "cluster_id": ingest.cluster_id, "topic_name": name,
                          "partitions_count": n, "is_internal": name.startswith("__")}
                         for name, n in sorted(topics.items())]}

    @app.get("/topics")
    async def v2_topics() -> JSONResponse:
        topics = await asyncio.to_thread(ingest.catalog.refresh)
        return JSONResponse(sorted(t for t in topics if not t.startswith("__")), media_type=V2_JSON.decode())

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode())

    @app.get("/api/stats")
    async def stats() -> dict:
        return buffer.stats()

    @app.get("/healthz")
    async def health() -> JSONResponse:
        ok = buffer.log_reachable
        return JSONResponse({"log_reachable": ok, "buffered": buffer.buffered}, status_code=200 if ok else 503)

    return app

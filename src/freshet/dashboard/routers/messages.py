"""A topic's records: found (browse, filters evaluated in the server within a scan budget, download as JSON
lines) and produced from the page. Both go through confluent-kafka, as any client of the cluster would."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, Producer
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from freshet.client import producer_config

from ..browse import START_KINDS, BadRequest, Cancelled, Filters, Scan, ScanTimeout, search
from ..collector import Collector
from ..scan_columns import ReadFailed
from . import Admin, Credentials, Source

router = APIRouter()
MAX_JSON_LIMIT = 1000  # records in one page answer; a download (format=jsonl) may ask for more
DIRECTIONS = {"forward": False, "oldest-first": False, "backward": True, "newest-first": True}
TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
SEARCH_THREADS = 4  # scans at once; more wait their turn, and none takes a thread of the default executor
_searches = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="console-search")
finished: deque = deque(maxlen=50)  # the last searches: {"topic", "outcome" (done, cancelled, error), "scanned"}
running = {"scans": 0}  # searches on a search thread now
asked: set = set()  # the stop flags of the searches asked for and not yet answered (running or waiting a thread)


def run_search(bootstrap: str, scan: Scan, stop: threading.Event, on_progress=None, on_matches=None):
    """``search`` on a search thread, its end noted in ``finished``."""
    scanned = {"n": 0}

    def heard(p: dict) -> None:
        scanned["n"] = p["scanned"]
        if on_progress is not None:
            on_progress(p)

    outcome = "error"
    running["scans"] += 1
    try:
        result = search(bootstrap, scan, heard, stop, on_matches)
        outcome, scanned["n"] = "done", result.scanned
        return result
    except Cancelled:
        outcome = "cancelled"
        raise
    finally:
        running["scans"] -= 1
        finished.append({"topic": scan.topic, "outcome": outcome, "scanned": scanned["n"]})


async def searched(bootstrap: str, scan: Scan, stop: threading.Event, on_progress=None, on_matches=None):
    """The search on the search threads; told to stop when the request is cancelled (its client went away)."""
    asked.add(stop)
    try:
        return await asyncio.get_running_loop().run_in_executor(_searches, run_search, bootstrap, scan, stop,
                                                                on_progress, on_matches)
    finally:
        stop.set()  # a no-op when it has ended; else it ends before its next fetch
        asked.discard(stop)


def partitions_of(collector: Collector, topic: str) -> int:
    """The topic's partition count from the cluster's metadata now (not the last snapshot: a topic created a
    moment ago is found); 404 when there is no such topic."""
    try:
        md = collector.admin.list_topics(timeout=10)
    except KafkaException as exc:
        raise HTTPException(503, f"cannot reach the cluster: {exc.args[0].str()}") from None
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        raise HTTPException(404, f"topic {topic!r} does not exist")
    return len(meta.partitions)


@router.get("/api/topics/{topic}/messages")
async def messages(topic: str, collector: Source, credentials: Credentials, admin: Admin,
                   partition: str = "all", start: str | None = None, offset: int | None = Query(None, ge=0),
                   timestamp: int | None = Query(None, ge=0), direction: str | None = None,
                   limit: int = Query(50, ge=1, le=1_000_000), max_scan: int = Query(100_000, ge=1, le=100_000_000),
                   key: str | None = None, value: str | None = None, header: str | None = None,
                   json_path: str | None = None,
                   cursor: str | None = None, format: Literal["json", "jsonl", "stream"] = "json"):
    """Records of ``partition`` (a number, or ``all``) from ``start`` (``newest``, ``oldest``, ``offset`` with
    ``offset=N``, ``timestamp`` with ``timestamp=ms``; ``offset=``/``timestamp=`` alone imply it) going
    ``direction`` (``forward``/``oldest-first`` or ``backward``/``newest-first``), those matching every filter
    given: ``key`` (exact), ``value`` (substring of the bytes), ``header`` (``name=value``, or ``name``: has it),
    ``json_path`` (a JSONPath expression that finds something in the value, or ``PATH OP JSON`` such as
    ``$.user.id == "u1"``). At most ``limit`` matches after at most ``max_scan`` records read; the answer's
    ``progress.line`` says "scanned N of M, K matches". ``format=jsonl``: a download, one record a line;
    ``format=stream``: JSON lines ``{"progress": ...}`` as the scan goes, then the answer as ``{"done": ...}`` (or
    ``{"error": "..."}``). The answer's ``next`` is the ``cursor`` of the next page (same filters and direction),
    null when nothing is left to read. With sign-in the scan reads as the signed-in user: their ACLs decide (403
    without READ on the topic)."""
    count = partitions_of(collector, topic)
    if credentials is not None:  # signed in: a topic the user may not even describe is refused before any read
        await asyncio.to_thread(described_as_user, admin, topic)
    if partition == "all":
        chosen = list(range(count))
    else:
        try:
            chosen = [int(partition)]
        except ValueError:
            raise HTTPException(400, f"partition must be a number or 'all', not {partition!r}") from None
        if not 0 <= chosen[0] < count:
            raise HTTPException(400, f"partition {chosen[0]} does not exist: topic {topic!r} has partitions "
                                     f"0..{count - 1}")
    start = start or ("offset" if offset is not None else "timestamp" if timestamp is not None else "newest")
    if start not in START_KINDS:
        raise HTTPException(400, f"start must be one of {', '.join(START_KINDS)}, not {start!r}")
    if start == "offset" and offset is None:
        raise HTTPException(400, "start=offset needs offset=N")
    if start == "timestamp" and timestamp is None:
        raise HTTPException(400, "start=timestamp needs timestamp=MILLISECONDS")
    if direction is not None and direction not in DIRECTIONS:
        raise HTTPException(400, f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
    backward = DIRECTIONS[direction] if direction else start == "newest"
    if cursor is not None and (start, backward) == ("newest", False):
        start = "oldest"  # a page on, forward: where it starts is the cursor's
    if (start, backward) in (("newest", False), ("oldest", True)):
        raise HTTPException(400, f"nothing lies {'after the newest' if start == 'newest' else 'before the oldest'} "
                                 "record: read newest backward or oldest forward")
    if format != "jsonl" and limit > MAX_JSON_LIMIT:
        raise HTTPException(400, f"limit is at most {MAX_JSON_LIMIT} on the page; download (format=jsonl) for more")
    try:
        filters = Filters.parse(key, value, header, json_path)
    except BadRequest as exc:
        raise HTTPException(400, str(exc)) from None
    scan = Scan(topic, chosen, start, offset, timestamp, backward, limit, max_scan, filters,
                parse_cursor(cursor, chosen) if cursor is not None else None, credentials)
    if format == "stream":
        return StreamingResponse(streamed(collector.bootstrap, scan), media_type="application/x-ndjson")
    try:
        result = await searched(collector.bootstrap, scan, threading.Event())
    except BadRequest as exc:
        raise HTTPException(400, str(exc)) from None
    except KafkaException as exc:
        raise HTTPException(refused_status(exc), f"the cluster refused the read: {refused_line(exc)}") from None
    except ScanTimeout as exc:
        raise HTTPException(504, str(exc)) from None
    except ReadFailed as exc:
        raise HTTPException(502, f"the cluster refused the read: {exc}") from None
    if format == "jsonl":
        lines = (json.dumps(r, ensure_ascii=False) + "\n" for r in result.records)
        return StreamingResponse(lines, media_type="application/x-ndjson", headers={
            "Content-Disposition": f'attachment; filename="{topic}.jsonl"', "X-Scan-Progress": result.progress["line"]})
    return answer(scan, result)


def described_as_user(admin, topic: str) -> None:
    """A 403 with the cluster's error when the acting user's Metadata refuses ``topic`` (no DESCRIBE on it)."""
    try:
        err = admin.list_topics(topic=topic, timeout=10).topics[topic].error
    except KafkaException as exc:
        err = exc.args[0]
    if err is not None and "AUTHORIZATION" in err.name():
        raise HTTPException(403, f"the cluster refused the read: {err.name()}: {err.str()}")


def refused_status(exc: KafkaException) -> int:
    """403 when the reader may not read the topic (the signed-in user's ACLs), else 502."""
    return 403 if "AUTHORIZATION" in exc.args[0].name() else 502


def refused_line(exc: KafkaException) -> str:
    err = exc.args[0]
    return f"{err.name()}: {err.str()}" if "AUTHORIZATION" in err.name() else err.str()


def answer(scan: Scan, result) -> dict:
    return {"topic": scan.topic, "partitions": scan.partitions, "start": "cursor" if scan.cursor else scan.start,
            "direction": "backward" if scan.backward else "forward", "records": result.records,
            "progress": result.progress, "next": format_cursor(result.cursor)}


def format_cursor(cursor: dict[int, int] | None) -> str | None:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items())) if cursor else None


def parse_cursor(text: str, partitions: list[int]) -> dict[int, int]:
    """``0:120,1:118`` (as an answer's ``next`` gives it) -> {0: 120, 1: 118}; a 400 for anything else."""
    out = {}
    for part in text.split(","):
        p, sep, o = part.partition(":")
        try:
            p, o = int(p), int(o)
        except ValueError:
            raise HTTPException(400, f"cursor must be PARTITION:OFFSET,... as a page's next gives it, "
                                     f"not {text!r}") from None
        if not sep or o < 0 or p not in partitions:
            raise HTTPException(400, f"cursor {text!r} names {'an offset below 0' if o < 0 else f'partition {p}'}, "
                                     f"which this search does not read")
        out[p] = o
    return out


async def streamed(bootstrap: str, scan: Scan):
    """The scan on a search thread; its progress and its matches as found, then its answer, as JSON lines. When the
    client goes away the response is cancelled, and so is the scan (before its next fetch)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def put(event: dict) -> None:  # on the search thread
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # the server's loop is gone
            stop.set()

    async def run() -> None:
        try:
            result = await searched(bootstrap, scan, stop, lambda p: put({"progress": p}),
                                    lambda found: put({"matches": found}))
            await events.put({"done": answer(scan, result)})
        except Cancelled:
            pass
        except (BadRequest, ScanTimeout) as exc:
            await events.put({"error": str(exc)})
        except KafkaException as exc:
            await events.put({"error": f"the cluster refused the read: {refused_line(exc)}"})
        except ReadFailed as exc:
            await events.put({"error": f"the cluster refused the read: {exc}"})
        except Exception as exc:  # one line for the page, never a stack trace
            await events.put({"error": f"the search failed: {exc}"})
        await events.put(None)

    task = asyncio.create_task(run())
    try:
        while (event := await events.get()) is not None:
            yield json.dumps(event, ensure_ascii=False) + "\n"
    finally:
        stop.set()
        task.cancel()


class NewRecord(BaseModel):
    partition: int | None = None  # none: the producer's partitioner (by the key's hash; keyless: sticky)
    key: str | None = None
    value: str | None = None  # none: a tombstone
    headers: dict[str, str] | list[tuple[str, str]] | None = None
    encoding: Literal["text", "base64"] = "text"  # how key, value and header values are written in this body


_producers: dict[tuple, Producer] = {}
_producers_lock = threading.Lock()


def _producer_key(bootstrap: str, credentials: dict | None) -> tuple:
    return bootstrap, tuple(sorted((credentials or {}).items()))


def producer_for(bootstrap: str, credentials: dict | None = None) -> Producer:
    """One producer per cluster and acting user (the signed-in one, else the dashboard's) for the dashboard's
    lifetime. ``message.max.bytes`` at librdkafka's ceiling so the broker, not the client, judges a record's size
    (its answer is what the page shows)."""
    key = _producer_key(bootstrap, credentials)
    with _producers_lock:
        if key not in _producers:
            _producers[key] = Producer(producer_config(bootstrap, {
                "linger.ms": 0, "log_level": 0, "message.max.bytes": 1_000_000_000, **(credentials or {})}))
        return _producers[key]


def decode(text: str | None, encoding: str, what: str) -> bytes | None:
    if text is None:
        return None
    if encoding == "text":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(400, f"{what} is not base64") from None


def produce(bootstrap: str, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
            headers: list, credentials: dict | None = None) -> tuple[int, int]:
    producer = producer_for(bootstrap, credentials)
    done = threading.Event()
    outcome: dict = {}

    def delivered(err, msg):
        outcome["err"], outcome["msg"] = err, msg
        done.set()

    extra = {} if partition is None else {"partition": partition}
    try:
        producer.produce(topic, value, key, headers=headers, on_delivery=delivered, **extra)
    except KafkaException as exc:
        outcome["err"] = exc.args[0]
        done.set()
    except BufferError:
        raise HTTPException(503, "the dashboard's producer queue is full; try again") from None
    deadline = time.monotonic() + 30
    while not done.is_set() and time.monotonic() < deadline:
        try:
            producer.poll(0.05)
        except KafkaException as exc:  # a fatal error (e.g. no producer id: not allowed to write idempotently)
            outcome["err"] = exc.args[0]
            done.set()
    if not done.is_set():
        raise HTTPException(504, "the broker did not acknowledge the record within 30 s")
    err = outcome["err"]
    if err is not None and err.fatal():  # the producer is spent: the next record gets a new one
        with _producers_lock:
            _producers.pop(_producer_key(bootstrap, credentials), None)
    if err is not None:
        status = 413 if err.code() in TOO_LARGE else 403 if "AUTHORIZATION" in err.name() else 502
        raise HTTPException(status, f"{err.name()}: {err.str()}")
    return outcome["msg"].partition(), outcome["msg"].offset()


@router.post("/api/topics/{topic}/messages")
async def produce_record(topic: str, record: NewRecord, collector: Source, credentials: Credentials) -> dict:
    """One record written with acks=all (idempotent); the answer is where it landed: ``{partition, offset}``."""
    count = partitions_of(collector, topic)
    if record.partition is not None and not 0 <= record.partition < count:
        raise HTTPException(400, f"partition {record.partition} does not exist: topic {topic!r} has partitions "
                                 f"0..{count - 1}")
    pairs = record.headers.items() if isinstance(record.headers, dict) else (record.headers or [])
    headers = [(name, decode(v, record.encoding, f"header {name!r}")) for name, v in pairs]
    key = decode(record.key, record.encoding, "key")
    value = decode(record.value, record.encoding, "value")
    partition, offset = await asyncio.to_thread(produce, collector.bootstrap, topic, record.partition, key, value,
                                                headers, credentials)
    return {"topic": topic, "partition": partition, "offset": offset}

"""The request and response shapes of the Confluent REST Proxy's produce APIs, as pure functions, so that
REST Proxy users' requests (and curl lines) work against Freshet unchanged.

v3 (``POST /v3/clusters/{cluster_id}/topics/{topic}/records``): one JSON object per record, several
concatenated in one request body (streaming mode), each answered by a delivery report with its own
``error_code`` (200 = written). Embedded types BINARY (base64), JSON and STRING; the schema-registry types
(AVRO, PROTOBUF, JSONSCHEMA) need a schema registry, which Freshet does not have, and get 400.
v2 (``POST /topics/{topic}``): ``{"records": [{"key", "value", "partition"}]}``, the embedded format taken
from the Content-Type (``application/vnd.kafka.json.v2+json``, ``...binary.v2+json``; plain ``application/json``
means binary); ``application/vnd.kafka.v2+json`` names no embedded format and is refused with 415, as the REST
Proxy refuses it for produce. Each record's answer carries the REST Proxy's ``error_code``: null when written,
1 when it failed for good (a record too large), 2 when retrying may succeed (the buffer full, the log away).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

V3_TYPES = ("BINARY", "JSON", "STRING")
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSONSCHEMA")


class ShapeError(Exception):
    """A request the REST Proxy would refuse: ``status`` is the HTTP status, ``code`` the REST Proxy's
    error_code (v3 uses the HTTP status; v2 its five-digit codes)."""

    def __init__(self, status: int, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code if code is not None else status
        self.message = message
        self.incomplete = False  # split_concatenated: more input could still make it whole

    def body(self) -> dict:
        return {"error_code": self.code, "message": self.message}


@dataclass(slots=True)
class OutgoingRecord:
    key: bytes | None
    value: bytes | None
    partition: int = -1
    headers: list | None = None
    timestamp_ms: int = 0
    key_type: str | None = None
    value_type: str | None = None


# ---- v3 -------------------------------------------------------------------------------------------------

def v3_record(obj, partitions: int) -> OutgoingRecord:
    """One v3 produce request object as a record; ShapeError(400/404) if it is not one."""
    if not isinstance(obj, dict):
        raise ShapeError(400, "a record is a JSON object")
    partition = obj.get("partition_id")
    if partition is None:
        partition = -1
    elif not isinstance(partition, int) or isinstance(partition, bool):
        raise ShapeError(400, "partition_id must be an integer")
    elif not 0 <= partition < partitions:
        raise ShapeError(404, f"partition {partition} not found (the topic has {partitions})")
    key, key_type = _v3_data(obj.get("key"), "key")
    value, value_type = _v3_data(obj.get("value"), "value")
    headers = None
    raw_headers = obj.get("headers")
    if raw_headers:
        if not isinstance(raw_headers, list):
            raise ShapeError(400, "headers must be a list of {name, value}")
        headers = []
        for h in raw_headers:
            if not isinstance(h, dict) or not isinstance(h.get("name"), str):
                raise ShapeError(400, "a header is {\"name\": string, \"value\": base64 or null}")
            v = h.get("value")
            headers.append((h["name"], None if v is None else _base64(v, f"header {h['name']!r}")))
    timestamp_ms = 0
    if obj.get("timestamp") is not None:
        timestamp_ms = parse_timestamp(obj["timestamp"])
    return OutgoingRecord(key, value, partition, headers, timestamp_ms, key_type, value_type)


def _v3_data(data, what: str) -> tuple[bytes | None, str | None]:
    if data is None:
        return None, None
    if not isinstance(data, dict):
        raise ShapeError(400, f"{what} must be an object: {{\"type\": ..., \"data\": ...}}")
    kind = data.get("type", "JSON")
    if len(data) == 2 and "data" in data and "type" in data:  # the usual shapes, checked at once
        payload = data["data"]
        if kind == "JSON":
            return (None if payload is None else orjson.dumps(payload)), kind  # JSON null: a null (tombstone)
        if kind == "STRING" and type(payload) is str:
            return payload.encode(), kind
    if not isinstance(kind, str):
        raise ShapeError(400, f"{what}.type must be a string")
    kind = kind.upper()
    if kind in SCHEMA_TYPES or any(k in data for k in ("schema", "schema_id", "schema_version", "subject")):
        raise ShapeError(400, f"{what}: {kind} and schemas need a schema registry, which Freshet does not have;"
                              f" use BINARY, JSON or STRING")
    if kind not in V3_TYPES:
        raise ShapeError(400, f"{what}.type {kind!r}: one of BINARY, JSON, STRING")
    if "data" not in data:
        raise ShapeError(400, f"{what} has no data")
    payload = data["data"]
    if payload is None:
        return None, kind
    if kind == "JSON":
        return orjson.dumps(payload), kind
    if not isinstance(payload, str):
        raise ShapeError(400, f"{what}.data must be a string for type {kind}")
    if kind == "STRING":
        return payload.encode(), kind
    return _base64(payload, what), kind


def _base64(text, what: str) -> bytes:
    if not isinstance(text, str):
        raise ShapeError(400, f"{what}: expected a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ShapeError(400, f"{what}: not valid base64") from None


def parse_timestamp(value) -> int:
    if not isinstance(value, str):
        raise ShapeError(400, "timestamp must be an ISO-8601 string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ShapeError(400, f"timestamp {value[:40]!r} is not ISO-8601") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise ShapeError(400, "timestamp before 1970")
    return ms


def iso(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 in UTC (``2026-11-25T08:20:01.123Z``); each second's text made once (a
    request's records are mostly stamped within the same second)."""
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds).decode()}{millis:03d}Z"


def _second(seconds: int) -> bytes:
    """``2026-11-25T08:20:01.`` for an epoch second, made once per second."""
    head = _ISO_SECONDS.get(seconds)
    if head is None:
        if len(_ISO_SECONDS) > 1024:
            _ISO_SECONDS.clear()
        head = _ISO_SECONDS[seconds] = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.").encode()
    return head


_ISO_SECONDS: dict[int, bytes] = {}
_TYPE_NAMES = {kind: kind.encode() for kind in V3_TYPES}


class V3Reports:
    """The delivery reports of one topic's records, as the JSON lines the v3 API answers with. A written
    record's line is formatted from a prefix made once (what orjson would write for the same dict, at a third
    of the cost of building and serializing a dict per record), and the second of its timestamp as text from a
    cache."""

    def __init__(self, cluster_id: str, topic: str) -> None:
        self._head = orjson.dumps({"error_code": 200, "cluster_id": cluster_id, "topic_name": topic})[:-1]

    def written(self, record: OutgoingRecord, partition: int, offset: int, timestamp_ms: int) -> bytes:
        seconds, millis = divmod(timestamp_ms, 1000)
        second = _ISO_SECONDS.get(seconds) or _second(seconds)
        key, value = record.key, record.value
        return b'%s,"partition_id":%d,"offset":%d,"timestamp":"%s%03dZ"%s%s}' % (
            self._head, partition, offset, second, millis,
            b"" if key is None else b',"key":{"type":"%s","size":%d}' % (_TYPE_NAMES[record.key_type], len(key)),
            b"" if value is None else b',"value":{"type":"%s","size":%d}' % (_TYPE_NAMES[record.value_type],
                                                                              len(value)))


_WHITESPACE = frozenset(" \t\r\n") | frozenset(b" \t\r\n")
_BETWEEN_OBJECTS = re.compile(rb"\}[ \t\r\n]*(?=\{)")


def _split_at_braces(data: bytes) -> list | None:
    """The fast way for the usual body, objects one after another: cut at every ``}`` followed by ``{``
    and parse each piece once; a cut inside a string makes a piece fail, which is then parsed together with
    the next. None when the whole does not parse this way (the caller's careful way says why)."""
    values = []
    start = 0
    loads = orjson.loads
    for cut in _BETWEEN_OBJECTS.finditer(data):
        try:
            values.append(loads(data[start:cut.start() + 1]))
        except orjson.JSONDecodeError:
            continue  # the cut was inside a value: the piece grows to the next cut
        start = cut.end()
    try:
        values.append(loads(data[start:]))
    except orjson.JSONDecodeError:
        return None
    return values


def split_concatenated(text: str | bytes) -> tuple[list, str | bytes, ShapeError | None]:
    """Complete JSON values at the front of ``text`` (concatenated JSON, whitespace between), the
    unparsed rest, and the error that stopped the split (``error.incomplete``: the rest may only be cut
    short). orjson parses each value: it stops at the end of the first with "unexpected content after
    document" and says where, and the value is parsed again up to there (twice orjson is still several
    times faster than the standard library's raw_decode once)."""
    if isinstance(text, bytes):
        values = _split_at_braces(text)
        if values is not None:
            return values, b"", None
        if not text.isascii():  # orjson's error positions count characters: bytes and characters differ
            return split_concatenated(text.decode("utf-8"))
        view = memoryview(text)  # ASCII: slices without copies, positions in bytes
    else:
        view = text
    values = []
    pos, n = 0, len(text)
    loads = orjson.loads
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            return values, text[:0], None
        rest = view[pos:] if pos else view
        try:
            values.append(loads(rest))
            return values, "", None
        except orjson.JSONDecodeError as exc:
            if exc.msg != "unexpected content after document":
                error = ShapeError(400, f"malformed JSON at character {pos + exc.pos}: {exc.msg}")
                error.incomplete = exc.msg == "unexpected end of data" or exc.pos >= len(rest)
                return values, text[pos:], error
            end = exc.pos
        values.append(loads(rest[:end]))
        pos += end




# ---- v2 -------------------------------------------------------------------------------------------------

def v2_format(content_type: str | None) -> str:
    """'json' or 'binary' from a v2 Content-Type; ShapeError(415) for what needs a schema registry or is
    not JSON at all."""
    ct = (content_type or "application/json").split(";")[0].strip().lower()
    if ct in ("application/json", "application/vnd.kafka.binary.v2+json", "application/vnd.kafka.binary+json",
              "application/octet-stream"):
        return "binary"
    if ct in ("application/vnd.kafka.v2+json", "application/vnd.kafka+json"):
        raise ShapeError(415, f"{ct} has no embedded format: produce with application/vnd.kafka.json.v2+json"
                              f" (JSON values) or application/vnd.kafka.binary.v2+json (base64)", 415)
    if ct in ("application/vnd.kafka.json.v2+json", "application/vnd.kafka.json+json"):
        return "json"
    if any(f".{k}." in ct or f".{k}+" in ct for k in ("avro", "protobuf", "jsonschema")):
        raise ShapeError(415, f"{ct}: schema formats need a schema registry, which Freshet does not have;"
                              f" use application/vnd.kafka.json.v2+json or ...binary.v2+json", 415)
    raise ShapeError(415, f"unsupported Content-Type {ct!r}", 415)


RETRIABLE_STATUSES = (429, 503)  # the buffer is full, the log unreachable or too slow: the same request may succeed


def v2_failure(error: ShapeError) -> dict:
    """A v2 answer's entry for a record that was not written, with the REST Proxy's error_code: 1 when it
    failed for good (a record too large, refused by the log), 2 when retrying may succeed."""
    return {"partition": None, "offset": None, "error_code": 2 if error.status in RETRIABLE_STATUSES else 1,
            "error": error.message}


def v2_records(body, embedded: str, partitions: int, path_partition: int | None = None) -> list[OutgoingRecord]:
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise ShapeError(422, 'the body is {"records": [{"key": ..., "value": ..., "partition": ...}]}', 42201)
    out = []
    append = out.append
    dumps = orjson.dumps
    as_json = embedded == "json"
    for i, r in enumerate(body["records"]):
        if type(r) is not dict:
            raise ShapeError(422, f"records[{i}] is not an object", 42201)
        partition = r.get("partition") if path_partition is None else path_partition
        if partition is None:
            partition = -1
        elif type(partition) is not int:  # bool is not int here
            raise ShapeError(422, f"records[{i}].partition must be an integer", 42201)
        elif not 0 <= partition < partitions:
            raise ShapeError(404, f"partition {partition} not found", 40402)
        key = r.get("key")
        value = r.get("value")
        if as_json:
            key = None if key is None else dumps(key)
            value = None if value is None else dumps(value)
        else:
            try:
                key = None if key is None else _base64(key, f"records[{i}].key")
                value = None if value is None else _base64(value, f"records[{i}].value")
            except ShapeError as exc:
                raise ShapeError(422, exc.message + " (binary embedded format: use"
                                 " application/vnd.kafka.json.v2+json for JSON)", 42205) from None
        append(OutgoingRecord(key, value, partition))
    return out

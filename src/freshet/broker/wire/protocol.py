"""Kafka wire protocol at the edge: kio entities in and out (frames and headers: freshet.format.framing).

Handlers work with kio's request dataclasses on the way in and return plain dicts on the way
out; ``build`` turns such a dict into the response dataclass of the version the client asked
for (fields the version lacks are dropped, fields the dict lacks take their zero value), so one
handler serves every version; with ``FRESHET_PROTOCOL_CHECKS=1`` (the test suite's brokers) a key that no
version has is a handler's typo and raises. Default-valued tagged fields are left out by kio's writer, which
Debian's kcat (librdkafka 2.0.2) needs.
"""

from __future__ import annotations

import datetime
import importlib
import io
import os
import uuid
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field
from kio.static.constants import EntityType

from freshet.format.errors import FrameError
from freshet.format.framing import SIZE, RequestHeader, response_header, skip_tagged_fields

from .frame_check import check as check_frame

_MAX_VERSION = 20  # above the highest version kio has of any API

ZERO_UUID = uuid.UUID(int=0)
# set to 1 (the test suite does): a handler's key that no version of its response has is an error, not dropped
CHECKS_VARIABLE = "FRESHET_PROTOCOL_CHECKS"


@cache
def _payload_schema(api_key: int, version: int, entity_type: EntityType) -> type:
    module = load_payload_module(api_key, version, entity_type)
    return next(
        v for v in vars(module).values()
        if isinstance(v, type) and getattr(v, "__type__", None) == entity_type
    )


def request_schema(api_key: int, version: int) -> type:
    return _payload_schema(api_key, version, EntityType.request)


def response_schema(api_key: int, version: int) -> type:
    return _payload_schema(api_key, version, EntityType.response)


@cache
def _reader(schema: type):
    return entity_reader(schema)


@cache
def _writer(schema: type):
    return entity_writer(schema)


def decode_request(frame: bytes, header: RequestHeader) -> Any:
    """Decode the body of a request whose api key and version are supported."""
    schema = request_schema(header.api_key, header.api_version)
    pos = header.body_offset
    if schema.__flexible__:
        pos = skip_tagged_fields(frame, pos)
    check_frame(schema, frame, pos)  # every size bounded by the frame before the native decoder allocates
    try:
        result = _reader(schema)(frame, pos)
    except FrameError:
        raise
    except Exception as exc:  # kio raises several kinds on malformed input
        raise FrameError(f"cannot decode {schema.__name__} v{header.api_version}: {exc}") from exc
    value, size = result if isinstance(result, tuple) else (result.value, result.size)
    return value


# -- building responses from dicts -----------------------------------------------------------

_ZERO = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint8": 0, "uint16": 0, "uint32": 0,
    "uint64": 0, "float64": 0.0, "string": "", "bytes": b"", "records": None, "bool": False,
}


def _convert(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64":
        if value is None or isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.timezone.utc)
    return value


def _zero(kafka_type: str | None, field_class: object, optional: bool) -> Any:
    if isinstance(field_class, (EntityTupleField, PrimitiveTupleField)):
        return ()
    if optional:
        return None
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "uuid":
        return ZERO_UUID
    return _ZERO.get(kafka_type, 0)


@cache
def _plan(schema: type) -> tuple:
    plan = []
    for f in fields(schema):
        field_class = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        optional = type(None) in getattr(f.type, "__args__", ())
        has_default = f.default is not MISSING or f.default_factory is not MISSING  # type: ignore[misc]
        nested = None
        if isinstance(field_class, (EntityField, EntityTupleField)):
            nested = field_class.type_
        plan.append((
            f.name, kafka_type, isinstance(field_class, EntityTupleField), nested,
            has_default, _zero(kafka_type, field_class, optional), optional,
        ))
    return tuple(plan)


@cache
def _defaults(schema: type) -> dict:
    out = {}
    for f in fields(schema):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


def _field_default(schema: type, name: str) -> Any:
    return _defaults(schema)[name]


@cache
def _own_names(schema: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(schema))


@cache
def _known_names(schema: type) -> frozenset[str]:
    """Field names of ``schema``'s entity in any version of its API: what a handler's dict may hold. (Importing
    every version's module costs tens to hundreds of milliseconds per API: ``build`` asks only under
    ``FRESHET_PROTOCOL_CHECKS=1``, as the tests run the broker, and only for a key its version lacks.)"""
    package, _, kind = schema.__module__.rpartition(".")  # kio.schema.<api>.v<N>, request|response
    api = package.rpartition(".")[0]
    names: set[str] = {f.name for f in fields(schema)}
    for version in range(_MAX_VERSION + 1):
        try:
            module = importlib.import_module(f"{api}.v{version}.{kind}")
        except ImportError:
            continue
        other = getattr(module, schema.__name__, None)
        if isinstance(other, type) and hasattr(other, "__dataclass_fields__"):
            names.update(f.name for f in fields(other))
    return frozenset(names)


def build(schema: type, data: dict) -> Any:
    """The ``schema`` dataclass filled from ``data`` (see the module docstring).

    A key that names no field of this entity in any version is a handler's typo: it raises
    ValueError instead of silently answering with the field's zero value (often "no error").
    """
    if not _own_names(schema).issuperset(data) and os.environ.get(CHECKS_VARIABLE) == "1" \
            and not _known_names(schema).issuperset(data):
        unknown = sorted(set(data) - _known_names(schema))
        raise ValueError(f"{schema.__name__} has no field {', '.join(unknown)} in any version")
    kwargs = {}
    for name, kafka_type, is_array, nested, has_default, zero, optional in _plan(schema):
        if name in data:
            value = data[name]
            if value is None and not optional:
                # a version where the field is not nullable: its zero value (e.g. "" for a string)
                kwargs[name] = zero if not has_default else _field_default(schema, name)
                continue
            if nested is not None and value is not None:
                value = tuple(build(nested, v) for v in value) if is_array else build(nested, value)
            elif is_array and value is not None:
                value = tuple(value)
            else:
                value = _convert(kafka_type, value)
            kwargs[name] = value
        elif not has_default:
            kwargs[name] = zero
    return schema(**kwargs)


def frame_parts(api_key: int, version: int, correlation_id: int, parts: list) -> list:
    """A response frame around a body already written as ``parts``: size and header put first."""
    header = response_header(api_key, correlation_id, response_schema(api_key, version).__flexible__)
    size = len(header) + sum(len(p) for p in parts)
    return [SIZE.pack(size) + header, *parts]


def encode_body(api_key: int, version: int, body: dict) -> bytes:
    """A response body alone (no size, no header), written by kio: for the rare responses the fast encoders
    leave to it (a KIP-951 leader hint's tagged fields)."""
    schema = response_schema(api_key, version)
    buf = io.BytesIO()
    _writer(schema)(buf, build(schema, body))
    return buf.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """A whole response frame: size, header (v0, or v1 for flexible versions), body. The bodies of the last
    answers kio wrote are kept: most answers of this path come again unchanged (ApiVersions, heartbeats, a
    transaction's AddPartitionsToTxn and EndTxn, Metadata while the topics stay the same), and writing one costs
    10-200 us of Python where looking it up costs a few."""
    schema = response_schema(api_key, version)
    key = _body_key(api_key, version, body)
    encoded = _ENCODED.get(key) if key is not None else None
    if encoded is None:
        buf = io.BytesIO()
        _writer(schema)(buf, build(schema, body))
        encoded = buf.getvalue()
        if key is not None and len(encoded) <= _ENCODED_MAX_BYTES:
            if len(_ENCODED) >= _ENCODED_MAX:
                del _ENCODED[next(iter(_ENCODED))]  # the oldest
            _ENCODED[key] = encoded
    header = response_header(api_key, correlation_id, schema.__flexible__)
    return SIZE.pack(len(header) + len(encoded)) + header + encoded


_ENCODED: dict = {}  # (api key, version, the body frozen) -> the body's bytes, oldest first
_ENCODED_MAX = 256
_ENCODED_MAX_BYTES = 16 << 10
_DICT = object()  # marks a frozen dict (a list of pairs is another value)


_FROZEN_MAX_VALUES = 64  # an answer of more values is not kept: its key would cost ~25x its bytes, its freezing
# ~45% of its encoding (a 5,000-partition Metadata), and such answers rarely come again the same


class _TooBig(Exception):
    pass


def _frozen(value: Any, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig
    kind = type(value)
    if kind is dict:
        return (_DICT, *((k, _frozen(v, budget)) for k, v in value.items()))
    if kind is list or kind is tuple:
        return tuple(_frozen(v, budget) for v in value)
    if kind is float:  # 0.0 and -0.0 are equal and written apart (a quota's float64)
        return float, value.hex()
    return value


def _body_key(api_key: int, version: int, body: dict) -> tuple | None:
    """A handler's answer as a dict key; None when some value cannot be one (nothing is kept then). Values that
    are equal encode alike in a field (0 and ErrorCode.none, True and 1), so equal keys mean equal bytes."""
    try:
        key = (api_key, version, _frozen(body, [_FROZEN_MAX_VALUES]))
    except _TooBig:
        return None
    try:
        hash(key)
    except TypeError:
        return None
    return key

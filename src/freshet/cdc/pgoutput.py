"""Decoding PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
Values arrive in text form; ``convert`` turns them into JSON-friendly Python values by type OID.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds


@dataclass
class Column:
    name: str
    type_oid: int
    is_key: bool


@dataclass
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # d default (primary key), f full, i index, n nothing
    columns: list[Column] = field(default_factory=list)

    @property
    def key_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.is_key]


@dataclass
class Begin:
    final_lsn: int
    commit_ts_ms: int
    xid: int


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts_ms: int


@dataclass
class Change:
    op: str  # c, u, d
    relation: Relation
    old: dict | None  # the key (or full old row with REPLICA IDENTITY FULL), for updates and deletes
    new: dict | None


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> str:
        b = self.data[self.pos : self.pos + 1].decode()
        self.pos += 1
        return b

    def int8(self) -> int:
        v = self.data[self.pos]
        self.pos += 1
        return v

    def unpack(self, fmt: str):
        s = struct.Struct(fmt)
        values = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        s = self.data[self.pos : end].decode()
        self.pos = end + 1
        return s


def _ts_ms(pg_us: int) -> int:
    return (pg_us + PG_EPOCH_US) // 1000


class Decoder:
    """Keeps the relations (table schemas) seen so far; turns messages into Begin/Commit/Change."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}

    def decode(self, data: bytes):
        r = Reader(data)
        kind = r.byte()
        if kind == "B":
            lsn, ts, xid = r.unpack(">qqi")
            return Begin(lsn, _ts_ms(ts), xid)
        if kind == "C":
            r.int8()
            commit_lsn, end_lsn, ts = r.unpack(">qqq")
            return Commit(commit_lsn, end_lsn, _ts_ms(ts))
        if kind == "R":
            relid = r.unpack(">I")
            namespace, name = r.string(), r.string()
            identity = chr(r.int8())
            ncols = r.unpack(">h")
            columns = []
            for _ in range(ncols):
                flags = r.int8()
                col = r.string()
                type_oid, _typmod = r.unpack(">Ii")
                columns.append(Column(col, type_oid, bool(flags & 1)))
            rel = Relation(relid, namespace or "public", name, identity, columns)
            self.relations[relid] = rel
            return rel
        if kind == "I":
            rel = self.relations[r.unpack(">I")]
            r.byte()  # 'N'
            return Change("c", rel, None, self._tuple(r, rel))
        if kind == "U":
            rel = self.relations[r.unpack(">I")]
            marker = r.byte()
            old = None
            if marker in ("K", "O"):
                old = self._tuple(r, rel, keys_only=marker == "K")
                r.byte()  # 'N'
            return Change("u", rel, old, self._tuple(r, rel))
        if kind == "D":
            rel = self.relations[r.unpack(">I")]
            marker = r.byte()
            return Change("d", rel, self._tuple(r, rel, keys_only=marker == "K"), None)
        return None  # Truncate, Type, Origin, Message: not change events

    def _tuple(self, r: Reader, rel: Relation, keys_only: bool = False) -> dict:
        ncols = r.unpack(">h")
        row: dict = {}
        for i in range(ncols):
            col = rel.columns[i] if i < len(rel.columns) else Column(f"col{i}", 25, False)
            kind = r.byte()
            if kind == "n":
                value = None
            elif kind == "u":
                continue  # unchanged TOAST value: not sent
            else:
                length = r.unpack(">i")
                text = r.data[r.pos : r.pos + length].decode()
                r.pos += length
                value = convert(col.type_oid, text)
            if keys_only and not col.is_key and value is None:
                continue
            row[col.name] = value
        return row


BOOL, BYTEA, INT8, INT2, INT4, TEXT, JSON, FLOAT4, FLOAT8, NUMERIC, JSONB = 16, 17, 20, 21, 23, 25, 114, 700, 701, 1700, 3802
TIMESTAMP, TIMESTAMPTZ, DATE = 1114, 1184, 1082
INT_ARRAYS = {1005, 1007, 1016}
TEXT_ARRAYS = {1009, 1015}


def _parse_array(text: str, cast) -> list:
    inner = text[1:-1]
    if not inner:
        return []
    out = []
    for item in _split_array(inner):
        out.append(None if item == "NULL" else cast(item))
    return out


def _split_array(inner: str) -> list[str]:
    items, current, quoted, escaped = [], [], False, False
    for ch in inner:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return items


def convert(type_oid: int, text: str):
    """Text output of a PostgreSQL value -> a JSON value, as Debezium's JSON converter would show it."""
    if type_oid in (INT2, INT4, INT8):
        return int(text)
    if type_oid in (FLOAT4, FLOAT8):
        return float(text)
    if type_oid == BOOL:
        return text == "t"
    if type_oid == NUMERIC:
        return text  # exact: a string, never a float
    if type_oid in (JSON, JSONB):
        return json.loads(text)
    if type_oid == BYTEA:
        return base64.b64encode(bytes.fromhex(text[2:])).decode()  # "\\x..." -> base64, as Debezium
    if type_oid == TIMESTAMPTZ:
        return datetime.fromisoformat(_pad_tz(text)).astimezone(timezone.utc).isoformat()
    if type_oid in INT_ARRAYS:
        return _parse_array(text, int)
    if type_oid in TEXT_ARRAYS:
        return _parse_array(text, str)
    return text


def _pad_tz(text: str) -> str:
    # PostgreSQL prints "+00" / "+05:30"; Python 3.11 wants "+00:00"
    if len(text) >= 3 and text[-3] in "+-" and text[-2:].isdigit():
        return text + ":00"
    return text

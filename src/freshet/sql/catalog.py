"""Streams and tables declared over topics, kept in the compacted topic ``__freshet_sql`` so they outlive the
session that declared them (and any restart of the broker's clients).

Keys: ``stream:<name>`` and ``table:<name>`` (the name lower-cased: Spark's view names are case-insensitive),
``query:<id>`` for persistent queries (``freshet.sql.queries`` stores them through :meth:`Catalog.put_query`).
Values: JSON; dropping writes a tombstone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from freshet.client.errors import ClientError
from freshet.client.stored import StoredDefinitions

from .errors import SqlError
from .parser import Column, CreateSource, duration_seconds

SQL_TOPIC = "__freshet_sql"
FORMATS = ("json", "csv", "raw", "avro", "debezium")
# what each option means: docs/sql.md
OPTIONS = ("topic", "format", "key", "timestamp", "watermark", "schema", "schema_file", "framing", "delimiter",
           "partitions")


@dataclass
class Definition:
    """A stream or a table over a topic: how to read its records into rows."""

    kind: str  # "stream" | "table"
    name: str
    topic: str
    format: str
    columns: list[Column] = field(default_factory=list)
    key: str | None = None  # a table's key column (the latest row per key is the table)
    timestamp: str | None = None  # the event-time column (default: the record's timestamp, ROWTIME)
    watermark: str | None = None  # how late an event may be, behind the largest event time seen
    options: dict[str, str] = field(default_factory=dict)  # the rest of WITH (...): schema, delimiter...
    text: str = ""  # the CREATE statement as written

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> Definition:
        value = dict(value)
        value["columns"] = [Column(**c) for c in value.get("columns", [])]
        return cls(**{k: v for k, v in value.items() if k in cls.__dataclass_fields__})

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name.lower() == name.lower()), None)


def definition(stmt: CreateSource) -> Definition:
    """The definition ``stmt`` declares; SqlError (pointing at the statement) when its options cannot work."""
    options = dict(stmt.options)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise stmt.error(f"unknown option {unknown[0]!r} in WITH (...); options: {', '.join(OPTIONS)}")
    topic = options.pop("topic", None)
    if not topic:
        raise stmt.error(f"CREATE {stmt.kind.upper()} {stmt.name} needs WITH (topic='...')")
    fmt = options.pop("format", "").lower()
    if fmt not in FORMATS:
        given = f"format {fmt!r}" if fmt else "no format"
        raise stmt.error(f"{given}: WITH (format=...) takes {', '.join(FORMATS)}")
    if fmt == "debezium" and stmt.kind != "table":
        raise stmt.error("format 'debezium' (change events) makes a TABLE: CREATE TABLE ... WITH (key='...')")
    columns = list(stmt.columns)
    keys = [c.name for c in columns if c.key]
    key = options.pop("key", None)
    if key and keys and key.lower() != keys[0].lower():
        raise stmt.error(f"key={key!r} but column {keys[0]} is declared PRIMARY KEY")
    key = key or (keys[0] if keys else None)
    if fmt == "avro":
        schema = _avro_schema(stmt, options)
        if not columns:
            columns = avro_columns(stmt, schema)
    if fmt == "raw":
        columns = columns or [Column("value", "STRING")]
        plain = [c for c in columns if c.expr is None]
        if len(plain) != 1 or plain[0].type.upper() not in ("STRING", "BINARY"):
            raise stmt.error("format 'raw' reads the whole value into one column: (name STRING) or (name BINARY), "
                             "plus computed columns (name AS expr)")
    if options.get("framing", "none").lower() not in ("none", "confluent"):
        raise stmt.error(f"framing takes 'none' or 'confluent', got {options['framing']!r}")
    if fmt == "csv" and "delimiter" in options and len(options["delimiter"]) != 1:
        raise stmt.error(f"delimiter must be one character, got {options['delimiter']!r}")
    if stmt.kind == "table" and not key:
        raise stmt.error(f"a TABLE is the latest row per key: WITH (key='column') or a column declared "
                         f"PRIMARY KEY in {stmt.name}")
    defn = Definition(stmt.kind, stmt.name, topic, fmt, columns, key, options.pop("timestamp", None),
                      options.pop("watermark", None), options, stmt.text)
    for what in ("key", "timestamp"):
        name = getattr(defn, what)
        if name and defn.column(name) is None:
            raise stmt.error(f"{what}={name!r} is not a column of {stmt.name} "
                             f"({', '.join(c.name for c in columns)})")
    if defn.watermark is not None and duration_seconds(defn.watermark) is None:
        raise stmt.error(f"watermark must be a duration like '30 seconds' or '2 minutes', got {defn.watermark!r}")
    if "partitions" in options and not str(options["partitions"]).isdigit():
        raise stmt.error(f"partitions must be a whole number, got {options['partitions']!r}")
    return defn


def _avro_schema(stmt: CreateSource, options: dict) -> dict:
    """The Avro schema of WITH (schema='{...}') or (schema_file='path'), kept inline in the definition so every
    session reads it the same way."""
    if "schema_file" in options:
        path = options.pop("schema_file")
        try:
            with open(os.path.expanduser(path)) as f:
                options["schema"] = f.read()
        except OSError as e:
            raise stmt.error(f"cannot read the Avro schema file {path!r}: {e.strerror}") from None
    if "schema" not in options:
        raise stmt.error("format 'avro' needs its schema: WITH (schema='{\"type\": \"record\", ...}') "
                         "or (schema_file='path.avsc')")
    try:
        schema = json.loads(options["schema"])
    except ValueError as e:
        raise stmt.error(f"the Avro schema is not JSON: {e}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        raise stmt.error("the Avro schema must be a record: {\"type\": \"record\", \"name\": ..., \"fields\": [...]}")
    try:
        import fastavro

        fastavro.parse_schema(schema)
    except ImportError:
        raise stmt.error("format 'avro' needs fastavro (pip install fastavro)") from None
    except Exception as e:  # fastavro's SchemaParseException and friends
        raise stmt.error(f"the Avro schema is not valid: {e}") from None
    return schema


_AVRO_TYPES = {"string": "STRING", "int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
               "boolean": "BOOLEAN", "bytes": "BINARY"}


def avro_columns(stmt: CreateSource, schema: dict) -> list[Column]:
    """Columns from an Avro record's fields (nullable unions taken as their one other type; logical
    timestamp-millis/micros as TIMESTAMP, date as DATE)."""
    columns = []
    for f in schema["fields"]:
        kind = f["type"]
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            kind = others[0] if len(others) == 1 else None
        if isinstance(kind, dict):
            logical = kind.get("logicalType")
            spark_type = {"timestamp-millis": "TIMESTAMP", "timestamp-micros": "TIMESTAMP", "date": "DATE"}.get(
                logical) or _AVRO_TYPES.get(kind.get("type"))
        else:
            spark_type = _AVRO_TYPES.get(kind)
        if spark_type is None:
            raise stmt.error(f"Avro field {f['name']!r} has a type this reader does not map ({f['type']!r}); "
                             "declare the columns you want instead")
        columns.append(Column(f["name"], spark_type))
    return columns


class Catalog:
    """The definitions of ``__freshet_sql`` as last read (``refresh`` reads what is new)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._stored = StoredDefinitions(bootstrap, SQL_TOPIC)

    def refresh(self) -> None:
        try:
            self._stored.refresh()
        except ClientError as e:
            raise SqlError(f"cannot read the SQL catalog ({SQL_TOPIC}): {e}") from None

    def _entries(self, prefix: str) -> dict[str, dict]:
        return {k.partition(":")[2]: v for k, v in self._stored.definitions.items() if k.startswith(prefix)}

    def definitions(self) -> list[Definition]:
        self.refresh()
        found = [Definition.from_json(v["definition"]) for k, v in self._stored.definitions.items()
                 if k.startswith(("stream:", "table:"))]
        return sorted(found, key=lambda d: (d.kind, d.name.lower()))

    def streams(self) -> list[Definition]:
        return [d for d in self.definitions() if d.kind == "stream"]

    def tables(self) -> list[Definition]:
        return [d for d in self.definitions() if d.kind == "table"]

    def get(self, name: str, refresh: bool = True) -> Definition | None:
        if refresh:
            self.refresh()
        for kind in ("stream", "table"):
            value = self._stored.definitions.get(f"{kind}:{name.lower()}")
            if value is not None:
                return Definition.from_json(value["definition"])
        return None

    def put(self, defn: Definition) -> None:
        self._put(f"{defn.kind}:{defn.name.lower()}", defn.text, definition=defn.to_json())

    def drop(self, defn: Definition) -> None:
        self._remove(f"{defn.kind}:{defn.name.lower()}")

    # persistent queries (freshet.sql.queries)
    def put_query(self, query_id: str, record: dict) -> None:
        self._put(f"query:{query_id}", record.get("sql", ""), query=record)

    def queries(self) -> dict[str, dict]:
        self.refresh()
        return {k: v["query"] for k, v in self._entries("query:").items()}

    def delete_query(self, query_id: str) -> None:
        self._remove(f"query:{query_id}")

    def _put(self, key: str, text: str, **value) -> None:
        try:
            self._stored.put(key, text, **value)
        except ClientError as e:
            raise SqlError(str(e)) from None
        self._stored.definitions[key] = {"name": key, "text": text, **value}

    def _remove(self, key: str) -> None:
        try:
            self._stored.remove(key)
        except ClientError as e:
            raise SqlError(str(e)) from None
        self._stored.definitions.pop(key, None)

    def close(self) -> None:
        self._stored.close()

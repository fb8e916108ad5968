"""The queryable copy of each table a persistent query keeps (``CREATE TABLE t AS SELECT ...``), and pull queries
answered from it at once: ``SELECT * FROM t WHERE key = ...``.

The copy is SQLite by default (``<data dir>/sql/tables.sqlite``, WAL: one process writes, any reads), PostgreSQL
when ``FRESHET_SQL_PG_DSN`` names one (psycopg2, the project's driver). Two tables hold every SQL table:
``freshet_sql_tables`` (name, columns with their Spark types, key columns) and ``freshet_sql_rows`` (name, the
key's canonical JSON, the row's JSON). The persistent query upserts each microbatch's changed rows after writing
them to the table's topic; a replayed batch upserts the same rows again, so the copy converges to the topic.

A pull query is a SELECT of one stored table whose WHERE gives every key column a literal (``k = v AND ...``);
anything else is left to Spark (``pull`` returns None).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import functools
import json
import os
import re
import threading

from .results import Rows

ROWS_TABLE = "freshet_sql_rows"
TABLES_TABLE = "freshet_sql_tables"


def data_dir(session=None) -> str:
    """Where the SQL front end keeps its files: the session's ``data_dir``, else $FRESHET_DATA_DIR, else
    ./freshet-data."""
    given = getattr(session, "data_dir", None) if session is not None else None
    return os.path.abspath(given or os.environ.get("FRESHET_DATA_DIR") or "freshet-data")


def canonical(value):
    """A value as the copy compares keys: datetimes as ISO text ('2026-01-01 00:01:00'), integral numbers as
    ints, so a literal in a WHERE finds the row Spark wrote."""
    if isinstance(value, datetime.datetime):
        value = value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(datetime.timezone.utc) \
            .replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if hasattr(value, "asDict"):  # a struct (a window's start and end)
        return canonical(value.asDict())
    if hasattr(value, "toJson"):  # a VARIANT
        return json.loads(value.toJson())
    return value


# what canonical() gives back as it is: a row's values of these types skip it (the sink upserts every changed row of
# each microbatch in the process serving pull queries: its Python work holds the GIL their requests wait for)
_AS_IS = frozenset((int, str, bool, type(None)))
_KEY_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode  # json.dumps(...) with these, made once


def key_text(values) -> str:
    return _KEY_JSON([v if type(v) in _AS_IS else canonical(v) for v in values])


def _restore(value, type_: str):
    if value is None:
        return None
    if type_.startswith("timestamp") and isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    if type_ == "date" and isinstance(value, str):
        return datetime.date.fromisoformat(value)
    return value


class TableStore:
    """The copies of the tables: SQLite at ``path`` or PostgreSQL at ``dsn``."""

    def __init__(self, path: str | None = None, dsn: str | None = None) -> None:
        self.path, self.dsn = path, dsn
        self._local = threading.local()  # a connection per writing thread (foreachBatch: Spark's stream thread)
        self._readers: list = []  # idle connections for reads, any thread's (a pull query is a request's thread)
        self._readers_lock = threading.Lock()
        self._tables: dict[str, tuple[list[tuple[str, str]], list[str]]] = {}
        self.mark = "%s" if dsn else "?"
        with self._cursor() as cur:
            text = "TEXT"
            cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLES_TABLE} (name {text} PRIMARY KEY, columns {text}, "
                        f"key_columns {text})")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {ROWS_TABLE} (name {text}, key_json {text}, row_json {text}, "
                        "PRIMARY KEY (name, key_json))")

    def __getstate__(self) -> dict:
        """Pickled as where it is: a persistent query's sink over Spark Connect runs in the server's Python
        worker, which opens connections of its own."""
        return {"path": self.path, "dsn": self.dsn}

    def __setstate__(self, state: dict) -> None:
        self.path, self.dsn = state["path"], state["dsn"]
        self._local = threading.local()
        self._readers, self._readers_lock = [], threading.Lock()
        self._tables = {}
        self.mark = "%s" if self.dsn else "?"

    def _open(self):
        if self.dsn:
            import psycopg2

            return psycopg2.connect(self.dsn)
        import sqlite3

        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _connection(self):
        """This thread's connection, for writes."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    _IDLE_READERS = 8

    @contextlib.contextmanager
    def _reading(self):
        """A connection for reads, taken from the idle ones (opened when none is idle) and given back: a pull
        query over HTTP runs in a thread of its own, which would otherwise open (and leave) a connection each
        time. SQLite's WAL lets reads run beside the query's writes."""
        with self._readers_lock:
            conn = self._readers.pop() if self._readers else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            if self.dsn:
                conn.rollback()  # no transaction left open between reads
            with self._readers_lock:
                if len(self._readers) < self._IDLE_READERS:
                    self._readers.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def _read_one(self, sql: str, params: tuple):
        with self._reading() as conn:
            cur = conn.cursor()
            try:
                cur.execute(sql, params)
                return cur.fetchone()
            finally:
                cur.close()

    class _Transaction:
        def __init__(self, store: TableStore) -> None:
            self.store = store

        def __enter__(self):
            self.conn = self.store._connection()
            if not self.store.dsn:
                self.conn.execute("BEGIN IMMEDIATE")
            self.cur = self.conn.cursor()
            return self.cur

        def __exit__(self, kind, *_):
            if self.store.dsn:
                self.conn.commit() if kind is None else self.conn.rollback()
            else:
                self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
            self.cur.close()

    def _cursor(self):
        return TableStore._Transaction(self)

    def define(self, name: str, columns: list[tuple[str, str]], keys: list[str]) -> None:
        """(Re)declare table ``name``: its columns (name, Spark type) and key columns; rows of an earlier table
        of that name go."""
        m = self.mark
        with self._cursor() as cur:
            cur.execute(f"DELETE FROM {ROWS_TABLE} WHERE name = {m}", (name.lower(),))
            cur.execute(f"DELETE FROM {TABLES_TABLE} WHERE name = {m}", (name.lower(),))
            cur.execute(f"INSERT INTO {TABLES_TABLE} (name, columns, key_columns) VALUES ({m}, {m}, {m})",
                        (name.lower(), json.dumps(columns), json.dumps(keys)))
        self._tables[name.lower()] = (columns, keys)

    def drop(self, name: str) -> None:
        m = self.mark
        with self._cursor() as cur:
            cur.execute(f"DELETE FROM {ROWS_TABLE} WHERE name = {m}", (name.lower(),))
            cur.execute(f"DELETE FROM {TABLES_TABLE} WHERE name = {m}", (name.lower(),))
        self._tables.pop(name.lower(), None)

    def table(self, name: str) -> tuple[list[tuple[str, str]], list[str]] | None:
        """(columns, keys) of a stored table, or None: read each time (another process may have dropped or
        declared it again since)."""
        row = self._read_one(f"SELECT columns, key_columns FROM {TABLES_TABLE} WHERE name = {self.mark}",
                             (name.lower(),))
        if row is None:
            self._tables.pop(name.lower(), None)
            return None
        found = self._tables[name.lower()] = ([tuple(c) for c in json.loads(row[0])], json.loads(row[1]))
        return found

    def upsert(self, name: str, rows: list) -> int:
        """Rows (tuples in the table's column order) in; each replaces the row of its key."""
        columns, keys = self._tables.get(name.lower()) or self.table(name)
        names = [c for c, _ in columns]
        at = [names.index(k) for k in keys]
        m = self.mark
        values = []
        for row in rows:
            plain = [v if type(v) in _AS_IS else canonical(v) for v in row]
            values.append((name.lower(), _KEY_JSON([plain[i] for i in at]), json.dumps(plain)))
        if values:
            with self._cursor() as cur:
                cur.executemany(f"INSERT INTO {ROWS_TABLE} (name, key_json, row_json) VALUES ({m}, {m}, {m}) "
                                "ON CONFLICT (name, key_json) DO UPDATE SET row_json = excluded.row_json", values)
        return len(values)

    def get(self, name: str, key: list, columns: list[tuple[str, str]] | None = None) -> tuple | None:
        """The row of ``key`` (values of the key columns in order), or None. ``columns``: the table's, when the
        caller has just read them (``table``)."""
        columns = columns if columns is not None else self.table(name)[0]
        found = self._read_one(f"SELECT row_json FROM {ROWS_TABLE} WHERE name = {self.mark} AND key_json = "
                               f"{self.mark}", (name.lower(), key_text(key)))
        if found is None:
            return None
        return tuple(_restore(v, t) for v, (_, t) in zip(json.loads(found[0]), columns))

    def lookup(self, name: str, given: dict) -> tuple[list[tuple[str, str]], tuple | None] | None:
        """(columns, the row or None) of a stored table for ``given`` {key column (lower case): value}, read
        together in one query; None when ``name`` is no stored table or ``given`` is not exactly its key."""
        for _ in range(2):  # the keys as last seen, then (declared again meanwhile) as they are now
            known = self._tables.get(name.lower()) or self.table(name)
            if known is None or set(given) != {k.lower() for k in known[1]}:
                return None
            try:
                key = key_values(given, known[0], known[1])
            except LookupError:
                return None
            m = self.mark
            found = self._read_one(f"SELECT t.columns, t.key_columns, r.row_json FROM {TABLES_TABLE} t LEFT JOIN "
                                   f"{ROWS_TABLE} r ON r.name = t.name AND r.key_json = {m} WHERE t.name = {m}",
                                   (key_text(key), name.lower()))
            if found is None:
                self._tables.pop(name.lower(), None)
                return None
            columns, keys = [tuple(c) for c in json.loads(found[0])], json.loads(found[1])
            self._tables[name.lower()] = (columns, keys)
            if keys != known[1]:
                continue
            row = None if found[2] is None else tuple(_restore(v, t) for v, (_, t) in
                                                      zip(json.loads(found[2]), columns))
            return columns, row
        return None

    def count(self, name: str) -> int:
        return self._read_one(f"SELECT count(*) FROM {ROWS_TABLE} WHERE name = {self.mark}", (name.lower(),))[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        with self._readers_lock:
            idle, self._readers = self._readers, []
        for conn in idle:
            conn.close()


_STORES: dict[tuple, TableStore] = {}
_STORES_LOCK = threading.Lock()


def store_for(session=None) -> TableStore:
    """The copy this session's tables are kept in (one store object per place, shared in the process)."""
    dsn = getattr(session, "table_store_dsn", None) or os.environ.get("FRESHET_SQL_PG_DSN")
    where = ("pg", dsn) if dsn else ("sqlite", os.path.join(data_dir(session), "sql", "tables.sqlite"))
    with _STORES_LOCK:
        store = _STORES.get(where)
        if store is None:
            store = _STORES[where] = TableStore(dsn=dsn) if dsn else TableStore(path=where[1])
    return store


def _number(text: str):
    """A numeric literal's value: a whole number (digits only) as an exact int, anything else as an exact Decimal
    (``key_values`` compares it with its column as Spark does: exactly with a whole key, as a double with a double)."""
    if text.isdigit():
        return int(text)
    return decimal.Decimal(text)


_NUMERIC_TYPES = {"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long", "float", "real",
                  "double", "decimal", "dec", "numeric"}
_WHOLE_TYPES = {"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"}
_DATE_TEXT = re.compile(r"\s*\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?\s*")


def key_values(given: dict, columns, keys) -> list:
    """The values of a pull query's key literals (``given``: {key column (lower case): literal}) as the copy keeps
    its key columns, in ``keys``' order: a string for a timestamp or date column read as the instant or day it
    names (any spelling of ISO 8601 Spark casts alike: a T or a space, seconds and fractions or not); LookupError
    where Spark would cast the literal otherwise than the copy can compare it (a quoted number for a numeric
    column, a number for a string column, a zone): then Spark answers the statement."""
    types = {c.lower(): str(t).lower().split("(")[0].strip() for c, t in columns}
    out = []
    for k in keys:
        value, kind = given[k.lower()], types.get(k.lower(), "")
        if kind.startswith("timestamp") or kind == "date":
            if not isinstance(value, str) or not _DATE_TEXT.fullmatch(value):
                raise LookupError
            value = (datetime.date.fromisoformat(value.strip()[:10]) if kind == "date"
                     else datetime.datetime.fromisoformat(value.strip()))
        elif kind in ("string", "varchar", "char"):
            if not isinstance(value, str):
                raise LookupError
        elif kind in _NUMERIC_TYPES:
            if isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal)):
                raise LookupError
            if isinstance(value, decimal.Decimal):  # Spark: exact against a whole key, a double against a double
                whole = kind in _WHOLE_TYPES and value == value.to_integral_value()
                if kind in _WHOLE_TYPES and not whole and float(value).is_integer():
                    raise LookupError  # 1.00000000000000000001: no whole key equals it, its float does
                value = int(value) if whole else float(value)
        out.append(value)
    return out


def _literal(node):
    """A sqlglot literal's Python value; LookupError when the node is not a literal."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Neg):
        return -_literal(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else _number(node.this)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal):  # TIMESTAMP '...', DATE '...'
        return node.this.this
    raise LookupError


def _conditions(node, out: dict) -> None:
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _conditions(node.this, out)
    if isinstance(node, exp.And):
        _conditions(node.left, out)
        _conditions(node.right, out)
        return None
    if isinstance(node, exp.EQ):
        column, value = (node.left, node.right) if isinstance(node.left, exp.Column) else (node.right, node.left)
        if isinstance(column, exp.Column) and not column.table:
            out[column.name.lower()] = _literal(value)
            return None
    raise LookupError


def pull(session, sql: str) -> Rows | None:
    """The answer to a pull query from the stored copy, or None when ``sql`` is not one (Spark answers it)."""
    found = re.match(r"(?is)\s*select\b.*?\bfrom\s+`?(\w+)`?(?:\s+(?:as\s+)?\w+)?\s+where\b", sql)
    if not found:
        return None
    store = store_for(session)
    table = store.table(found.group(1))
    if table is None:
        return None
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return None
    if (not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("group")
            or tree.args.get("having") or tree.find(exp.AggFunc) or tree.args.get("order")
            or not isinstance(getattr(tree.args.get("from_") or tree.args.get("from"), "this", None), exp.Table)):
        return None
    columns, keys = table
    given: dict = {}
    try:
        _conditions(tree.args["where"].this, given)
    except LookupError:
        return None
    names = [c for c, _ in columns]
    lowered = [n.lower() for n in names]
    if set(given) != {k.lower() for k in keys}:
        return None
    try:
        key = key_values(given, columns, keys)
    except LookupError:
        return None  # a literal Spark casts otherwise than the copy can tell: Spark's to answer
    row = store.get(found.group(1), key, columns)
    wanted = []
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            wanted += [(n, i) for i, n in enumerate(names)]
        elif isinstance(item, exp.Column) and item.name.lower() in lowered:
            wanted.append((item.name, lowered.index(item.name.lower())))
        elif isinstance(item, exp.Alias) and isinstance(item.this, exp.Column) \
                and item.this.name.lower() in lowered:
            wanted.append((item.alias, lowered.index(item.this.name.lower())))
        else:
            return None  # an expression: Spark's to compute
    limit = tree.args.get("limit")
    rows = [] if row is None else [tuple(row[i] for _, i in wanted)]
    if limit is not None and _literal(limit.expression) == 0:
        rows = []
    return Rows([n for n, _ in wanted], rows)


# -- the fast path: the common shape of a pull query read without sqlglot
_WORD = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = rf"(?:{_WORD}|`{_WORD}`)"
_VALUE = r"(?:'[^'\\]*'|-?[0-9]+(?:\.[0-9]+)?)"
_ITEM = rf"{_NAME}(?:\s+AS\s+{_NAME})?"
_CONDITION = rf"({_NAME})\s*=\s*({_VALUE})"
_FAST = re.compile(rf"\s*SELECT\s+(\*|{_ITEM}(?:\s*,\s*{_ITEM})*)\s+FROM\s+({_NAME})\s+WHERE\s+"
                   rf"({_CONDITION}(?:\s+AND\s+{_CONDITION})*)\s*;?\s*", re.IGNORECASE)
_ITEMS = re.compile(rf"({_NAME})(?:\s+AS\s+({_NAME}))?", re.IGNORECASE)
_CONDITIONS = re.compile(_CONDITION, re.IGNORECASE)


@functools.cache
def _reserved() -> frozenset[str]:
    """Words sqlglot's Spark dialect reads as more than a column's name (keywords, functions without
    parentheses): a statement naming one is left to the general path."""
    from sqlglot.dialects.spark import Spark

    return frozenset(w.upper() for w in (*Spark.Tokenizer.KEYWORDS, *Spark.Parser.NO_PAREN_FUNCTION_PARSERS))


def _bare(name: str) -> str | None:
    """A name as sqlglot reads it (backticks off), or None for a reserved word written bare."""
    if name.startswith("`"):
        return name[1:-1]
    return None if name.upper() in _reserved() else name


def fast_pull(session, sql: str) -> Rows | None:
    """``pull`` for the common shape, ``SELECT * | col [AS name], ... FROM t WHERE k = literal [AND ...]`` (plain
    names, a plain string or a decimal number for each literal), without parsing it with sqlglot: the same answer
    as ``pull``, or None (then the general path runs, with its answers and errors). The table's columns and the row
    are read together, in one query of the copy."""
    found = _FAST.fullmatch(sql)
    if not found:
        return None
    table = _bare(found.group(2))
    given: dict = {}
    for column, value in _CONDITIONS.findall(found.group(3)):
        column = _bare(column)
        if column is None:
            return None
        if value.startswith("'"):
            given[column.lower()] = value[1:-1]
        else:
            given[column.lower()] = -_number(value[1:]) if value.startswith("-") else _number(value)
    items = []
    if found.group(1) != "*":
        for item in _ITEMS.finditer(found.group(1)):
            name, alias = _bare(item.group(1)), item.group(2) and _bare(item.group(2))
            if table is None or name is None or (item.group(2) and alias is None):
                return None
            items.append((name, alias))
    if table is None:
        return None
    looked_up = store_for(session).lookup(table, given)
    if looked_up is None:
        return None
    columns, row = looked_up
    lowered = [c.lower() for c, _ in columns]
    if found.group(1) == "*":
        wanted = [(n, i) for i, (n, _) in enumerate(columns)]
    else:
        wanted = []
        for name, alias in items:
            if name.lower() not in lowered:
                return None  # Spark's to answer (or to refuse)
            wanted.append((alias or name, lowered.index(name.lower())))
    return Rows([n for n, _ in wanted], [] if row is None else [tuple(row[i] for _, i in wanted)])

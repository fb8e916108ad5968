"""``SqlSession(bootstrap).execute(script)``: run a script of SQL statements, one result per statement.

Freshet's statements (``freshet.sql.parser``) are answered here; persistent queries, pull queries and
MATCH_RECOGNIZE go to ``freshet.sql.queries``, ``table_store`` and ``match_recognize``; everything else is Spark
SQL, run by Spark over temporary views of the declared streams and tables (a view is made when a statement
names it). A push query (``EMIT CHANGES``) is a streaming query whose microbatches hand their rows to the
caller as they come; it stops at its LIMIT or UNTIL, or when the caller stops it.

Bad input changes nothing: a statement is checked (names, topic, columns, what Spark accepts on a stream)
before anything is stored or started, and the error is one line, with the script's line and column where
Spark or the parser gives one.
"""

from __future__ import annotations

import importlib
import os
import queue
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

from freshet.client.admin import TopicAdmin

from . import parser as p
from .catalog import SQL_TOPIC, Catalog, Definition, definition
from .changes import Changes
from .errors import SqlError
from .plans import analyzed_text, joins_two_aggregations, key_columns
from .results import Message, Push, Rows
from .table_store import fast_pull


def _s2(module: str, function: str, statement: str):
    """A function of the persistent half (queries, table_store, match_recognize), or a clear "not yet"."""
    try:
        found = getattr(importlib.import_module(f"freshet.sql.{module}"), function)
    except (ImportError, AttributeError):
        raise SqlError(f"{statement} is not supported yet") from None
    return found


class SqlSession:
    """One user's SQL session: the catalog of streams and tables (shared through ``__freshet_sql``), the
    session's own settings (``SET 'auto.offset.reset'``) and the push queries it runs."""

    def __init__(self, bootstrap: str, spark=None, *, master: str | None = None, remote: str | None = None,
                 spark_factory=None, data_dir: str | None = None) -> None:
        """``spark``: the SparkSession to use; else ``spark_factory()`` gives one when a statement first needs it,
        else one is built (``master``/``remote`` as ``freshet run`` takes them). ``data_dir``: where persistent
        queries keep their checkpoints and table copies (``freshet.sql.queries``; None: its default)."""
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self._spark = spark
        self._spark_factory = spark_factory
        if spark is not None:
            quiet_query_context_logs()
        self._master, self._remote = master, remote
        self.catalog = Catalog(bootstrap)
        self.offset_reset = "earliest"
        self._views: dict[str, tuple] = {}  # view name (lower) -> what it was made from
        self._pushes: list[Push] = []
        self._lock = threading.Lock()

    # -- Spark
    @property
    def spark(self):
        if self._spark is None:
            from freshet.spark import session

            self._spark = (self._spark_factory() if self._spark_factory is not None
                           else session("freshet-sql", master=self._master, remote=self._remote))
            quiet_query_context_logs()
        return self._spark

    def register_views(self, text: str, batch: bool = False) -> list[Definition]:
        """Make a temporary view of every declared stream or table ``text`` names (a name in backticks too).
        ``batch``: a query without EMIT, which reads a table as it is now (its topic read to its end)."""
        try:
            words = {t.text.lower() for t in p.tokenize(text) if t.token_type not in (p.TokenType.STRING,
                                                                                      p.TokenType.NUMBER)}
        except SqlError:
            words = set()
        self.catalog.refresh()
        used = [defn for defn in self.catalog.definitions() if defn.name.lower() in words]
        # a table named beside a stream is read as a snapshot, planned again each microbatch (a stream-table join)
        beside_a_stream = any(d.kind == "stream" for d in used)
        for defn in used:
            self._view(defn, snapshot=defn.kind == "table" and (beside_a_stream or batch))
        return used

    def _view(self, defn: Definition, snapshot: bool = False) -> None:
        from .sources import dataframe

        made_of = (repr(defn.to_json()), self.offset_reset, snapshot)
        if self._views.get(defn.name.lower()) == made_of:
            return
        df = dataframe(self.spark, defn, self.bootstrap, self.offset_reset, snapshot=snapshot)
        df.createOrReplaceTempView(defn.name)
        self._views[defn.name.lower()] = made_of

    def dataframe(self, select: str, start: int = 0, script: str | None = None, batch: bool = False):
        """The DataFrame of a query (views made for the streams and tables it names); SqlError with the script's
        line and column when Spark refuses it. ``start``: where ``select`` begins in ``script``; ``batch``: a
        query without EMIT (tables read as they are now, see ``register_views``)."""
        self.register_views(select, batch)
        if re.search(r"\bMATCH_RECOGNIZE\b", select, re.IGNORECASE):
            return _s2("match_recognize", "to_dataframe", "MATCH_RECOGNIZE")(self, select)
        try:
            df = self.spark.sql(select)
        except Exception as e:
            raise spark_error(e, script if script is not None else select, start) from None
        if df.isStreaming and joins_two_aggregations(df):
            raise SqlError("a join of two tables (or of two aggregations) cannot run on streams: Spark joins no two "
                           "streaming aggregations; join a stream to a table, or join the streams and aggregate "
                           "after the join (CREATE STREAM j AS SELECT ... JOIN ..., then CREATE TABLE t AS SELECT "
                           "... FROM j GROUP BY ...)", *p.position(script if script is not None else select, start))
        return df

    # -- statements
    def execute(self, script: str) -> Iterator[Message | Rows | Push]:
        """The result of each statement of ``script`` in turn (a statement runs when its result is asked for);
        SqlError at the first that cannot run."""
        answer = fast_pull(self, script)  # a pull query of the common shape: no parsing
        if answer is not None:
            yield answer
            return
        for statement in p.parse(script):
            yield self.run(statement)

    def execute_one(self, text: str) -> Message | Rows | Push:
        answer = fast_pull(self, text)
        return answer if answer is not None else self.run(p.parse_one(text))

    def run(self, stmt: p.Statement) -> Message | Rows | Push:
        handler = getattr(self, "_" + type(stmt).__name__.lower())
        return handler(stmt)

    def _createsource(self, stmt: p.CreateSource) -> Message:
        defn = definition(stmt)
        existing = self.catalog.get(defn.name)
        if existing is not None:
            if stmt.if_not_exists:
                return Message(f"{existing.kind.capitalize()} {existing.name} already exists")
            if not stmt.or_replace:
                raise stmt.error(f"a {existing.kind} named {existing.name} already exists "
                                 f"(DROP {existing.kind.upper()} {existing.name} first, or CREATE OR REPLACE)")
            if existing.kind != defn.kind:
                raise stmt.error(f"{existing.name} is a {existing.kind}; CREATE OR REPLACE cannot make it a {defn.kind}")
        admin = TopicAdmin(self.bootstrap)
        created = ""
        if defn.topic not in admin.list_topics():
            if "partitions" not in defn.options:
                raise stmt.error(f"topic {defn.topic!r} does not exist (create it, or give WITH (partitions=N) to "
                                 "create it here)")
            configs = {"cleanup.policy": "compact"} if defn.kind == "table" else {}
            admin.create_topic(defn.topic, int(defn.options["partitions"]), configs)
            created = f", topic {defn.topic} created"
        self._check_columns(stmt, defn)
        self.catalog.put(defn)
        self._views.pop(defn.name.lower(), None)
        return Message(f"{defn.kind.capitalize()} {defn.name} created over topic {defn.topic}{created}")

    def _check_columns(self, stmt: p.CreateSource, defn: Definition) -> None:
        """Types Spark reads and computed columns that refer to real columns: resolved on a batch read of no
        records, so nothing is started."""
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, \
            TimestampType

        from .sources import decode

        raw_schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                                 StructField("topic", StringType()), StructField("partition", IntegerType()),
                                 StructField("offset", LongType()), StructField("timestamp", TimestampType()),
                                 StructField("timestampType", IntegerType())])
        for column in defn.columns:
            if column.type is not None:
                try:
                    self.spark.createDataFrame([], f"x {column.type}")
                except Exception as e:
                    raise stmt.error(f"column {column.name}: unknown type {column.type!r}", column.start) from None
        try:
            decoded = decode(self.spark.createDataFrame([], raw_schema), defn)
            decoded.schema  # resolves every column and computed expression
        except Exception as e:
            raise stmt.error(f"{defn.name}: {first_line(e)}") from None
        if defn.timestamp:
            kind = dict(decoded.dtypes).get(defn.column(defn.timestamp).name)
            if kind not in ("timestamp", "timestamp_ntz"):
                raise stmt.error(f"timestamp column {defn.timestamp} is {kind}: declare it TIMESTAMP, or BIGINT "
                                 "(epoch milliseconds)")

    def _createasselect(self, stmt: p.CreateAsSelect) -> Message:
        return _s2("queries", "create_as_select", f"CREATE {stmt.kind.upper()} ... AS SELECT")(self, stmt)

    def _terminate(self, stmt: p.Terminate) -> Message:
        return _s2("queries", "terminate", "TERMINATE")(self, stmt.query_id)

    def _setoption(self, stmt: p.SetOption) -> Message:
        if stmt.value.lower() not in ("earliest", "latest"):
            raise stmt.error(f"auto.offset.reset takes 'earliest' or 'latest', got {stmt.value!r}")
        self.offset_reset = stmt.value.lower()
        return Message(f"Successfully changed local property 'auto.offset.reset' to '{self.offset_reset}'")

    def _show(self, stmt: p.Show) -> Rows:
        if stmt.what == "topics":
            topics = TopicAdmin(self.bootstrap).list_topics()
            return Rows(["topic", "partitions"], sorted((t, n) for t, n in topics.items()
                                                        if stmt.extended or not t.startswith("__")))
        if stmt.what == "queries":
            return Rows(["query_id", "status", "sink", "sql"],
                        [(q.get("id", ""), q.get("status", ""), q.get("sink", ""), q.get("sql", ""))
                         for q in self.persistent_queries()])
        found = self.catalog.streams() if stmt.what == "streams" else self.catalog.tables()
        return Rows([stmt.what[:-1] + "_name", "topic", "format", "key", "timestamp"],
                    [(d.name, d.topic, d.format, d.key or "", d.timestamp or "") for d in found])

    def restore_queries(self) -> list[str]:
        """Start again the persistent queries stored in ``__freshet_sql`` (``freshet.sql.queries.restore``); the ids
        restarted. Only a process that keeps running calls it (``freshet sql --serve``, the dashboard)."""
        try:
            restore = _s2("queries", "restore", "persistent queries")
        except SqlError:
            return []
        return list(restore(self) or [])

    def persistent_queries(self) -> list[dict]:
        try:
            listing = _s2("queries", "list_queries", "SHOW QUERIES")
        except SqlError:
            return [dict(q, id=q.get("id", key)) for key, q in self.catalog.queries().items()]
        return listing(self)

    def _describe(self, stmt: p.Describe) -> Rows:
        defn = self.catalog.get(stmt.name)
        if defn is None:
            return self._sparksql(stmt)  # a view or a table of Spark's
        self._view(defn)
        schema = self.spark.table(defn.name).schema
        rows = [(f.name, f.dataType.simpleString(), _column_note(defn, f.name)) for f in schema.fields]
        rows += [("", "", ""), ("# " + defn.kind, defn.name, ""), ("topic", defn.topic, ""),
                 ("format", defn.format, "")]
        for what in ("key", "timestamp", "watermark"):
            if getattr(defn, what):
                rows.append((what, getattr(defn, what), ""))
        if defn.kind == "stream" and not defn.watermark:
            from freshet.pipelines.stateful import DEFAULT_LATENESS

            rows.append(("watermark", DEFAULT_LATENESS, "(the default)"))
        writers = [q for q in self.persistent_queries() if str(q.get("sink", "")).lower() == defn.name.lower()]
        if writers:
            from freshet.client.pipeline_registry import read_pipelines

            announced = read_pipelines(self.bootstrap)  # what the runner's reporter says of each running query
        for q in writers:
            rows.append(("written by", q.get("id", ""), q.get("status", "")))
            progress = announced.get(q.get("id", ""), {}).get("progress") or {}
            for label, key in (("input rows/s", "input_rows_per_second"),
                               ("processed rows/s", "processed_rows_per_second"),
                               ("late rows dropped", "late_rows_dropped"), ("query watermark", "watermark")):
                if progress.get(key) is not None:
                    value = progress[key]
                    rows.append((label, f"{value:.1f}" if isinstance(value, float) else str(value), ""))
        if stmt.extended:  # the topic's records (high watermark - log start, summed) and bytes on the leaders' disks
            partitions = TopicAdmin(self.bootstrap).describe_topic(defn.topic).partitions
            rows.append(("records", str(sum(p.records for p in partitions)), f"{len(partitions)} partitions"))
            sizes = [p.size_bytes for p in partitions]
            rows.append(("bytes", "" if None in sizes else str(sum(sizes)), "on the leaders' disks"))
        return Rows(["col_name", "data_type", "comment"], rows)

    def _explain(self, stmt: p.Explain) -> Rows:
        df = self.dataframe(stmt.select, stmt.select_start, stmt.script)
        if not df.isStreaming:  # Spark's own EXPLAIN, at the same offset so its positions hold
            prefix = stmt.script[stmt.start:stmt.select_start]
            return Rows(["plan"], [(row[0],) for row in self.spark.sql(prefix + stmt.select).collect()])
        # Spark plans a streaming query's physical plan only when it runs (each microbatch anew); before, its
        # plan is the analyzed logical one: the source, watermark, windows, aggregations and joins it will run
        plan = analyzed_text(df)
        return Rows(["plan"], [("== Analyzed Logical Plan (streaming) ==\n" + plan,)])

    def _drop(self, stmt: p.Drop) -> Message:
        defn = self.catalog.get(stmt.name)
        if defn is None or defn.kind != stmt.kind:
            if stmt.if_exists:
                return Message(f"No {stmt.kind} {stmt.name}: nothing dropped")
            other = f" ({stmt.name} is a {defn.kind})" if defn is not None else ""
            raise stmt.error(f"no {stmt.kind} named {stmt.name}{other}; SHOW {stmt.kind.upper()}S lists them")
        made_by = [q for q in self.persistent_queries() if str(q.get("sink", "")).lower() == defn.name.lower()]
        writers = [q for q in made_by if q.get("status", "") != "TERMINATED"]
        if writers:
            raise stmt.error(f"{defn.name} is written by query {writers[0].get('id')}: TERMINATE it first")
        self.catalog.drop(defn)
        if defn.kind == "table" and made_by:  # its queryable copy goes too: no pull query answers from it
            _s2("table_store", "store_for", "pull queries")(self).drop(defn.name)
        self._views.pop(defn.name.lower(), None)
        try:
            self.spark.catalog.dropTempView(defn.name) if self._spark is not None else None
        except Exception:  # the view was never made in this session
            pass
        said = f"{defn.kind.capitalize()} {defn.name} dropped"
        if stmt.delete_topic:
            TopicAdmin(self.bootstrap).delete_topic(defn.topic)
            said += f", topic {defn.topic} deleted"
        return Message(said)

    def _sparksql(self, stmt: p.Statement) -> Rows | Message:
        if re.match(r"\s*select\b", stmt.text, re.IGNORECASE):
            try:
                pull = _s2("table_store", "pull", "pull queries")
            except SqlError:
                pull = None
            if pull is not None:
                answer = pull(self, stmt.text)
                if answer is not None:
                    return answer
        # a query over tables alone reads them as they are now: a pull query over a table declared on a topic
        df = self.dataframe(stmt.text, stmt.start, stmt.script, batch=True)
        if df.isStreaming:
            raise stmt.error("this query reads a stream: add EMIT CHANGES to run it as a push query "
                             "(SELECT ... EMIT CHANGES LIMIT 10)")
        try:
            rows = df.collect()
        except Exception as e:
            raise spark_error(e, stmt.script, stmt.start) from None
        if not df.columns:
            return Message("OK")
        return Rows(list(df.columns), [tuple(r) for r in rows])

    def _pushquery(self, stmt: p.PushQuery) -> Push:
        df = self.dataframe(stmt.select, stmt.start, stmt.script)
        if not df.isStreaming:
            raise stmt.error("EMIT CHANGES runs a query over a stream or table; this query reads neither "
                             "(SHOW STREAMS lists them)")
        info = {"limit": stmt.limit, "until_rows": stmt.until_rows, "until_seconds": stmt.until_seconds,
                "types": [f.dataType.simpleString() for f in df.schema.fields], "late_rows": 0}
        push = PushQuery(self, df, stmt, info)
        push.start()
        result = Push(list(df.columns), push.rows(), push.stop, push.query_id, info)
        with self._lock:
            self._pushes = [r for r in self._pushes if r.info.get("active", True)] + [result]
        return result

    def close(self) -> None:
        for push in self._pushes:
            push.stop()
        self.catalog.close()


class PushQuery:
    """A streaming query whose microbatches hand their rows to ``rows()`` through a queue, in update mode (each
    changed result as it changes; append where Spark allows only that, or with EMIT FINAL)."""

    def __init__(self, session: SqlSession, df, stmt: p.PushQuery, info: dict) -> None:
        self.session, self.df, self.stmt, self.info = session, df, stmt, info
        self.query_id = "push_" + uuid.uuid4().hex[:8]
        self.queue: queue.Queue = queue.Queue()
        self.query = None
        self.checkpoint = tempfile.mkdtemp(prefix="freshet-sql-push-")
        self.stopped = threading.Event()
        self.changes = Changes(None)
        # over Spark Connect the query runs on the server, where no function of this process can run: its rows go
        # to Spark's memory sink, a view on the server read from here (``seen``: the rows of it already read)
        from freshet.spark.session import is_connect

        self.memory = is_connect(session.spark)
        self.seen = 0

    def _batch(self, batch, batch_id: int) -> None:
        rows = self.changes([tuple(r) for r in batch.collect()])
        if rows:
            self.queue.put(rows)

    def start(self) -> None:
        modes = ["append"] if self.stmt.final else ["update", "append"]
        last: Exception | None = None
        for mode in modes:
            # update mode writes every key a batch touched, changed or not: only the changed rows are given
            keys = key_columns(self.df, self.stmt.select, _s2("queries", "group_keys", "EMIT CHANGES")) \
                if mode == "update" else None
            self.changes = Changes(keys)
            writer = self.df.writeStream.outputMode(mode).queryName(self.query_id).trigger(processingTime="1 second")
            if self.memory:  # the memory sink keeps a checkpoint of its own on the server
                writer = writer.format("memory")
            else:
                writer = writer.foreachBatch(self._batch).option("checkpointLocation", self.checkpoint)
            try:
                self.query = writer.start()
                return
            except Exception as e:  # Spark refuses this mode for this query: try the next
                last = e
                if "output mode" not in str(e).lower() and "outputmode" not in str(e).lower():
                    break
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        raise spark_error(last, self.stmt.script, self.stmt.start) from None

    def _take(self, wait: bool) -> list[tuple]:
        """The rows that came since the last call (only the changed ones); waiting a moment for some if asked."""
        if not self.memory:
            try:
                return self.queue.get(timeout=0.2) if wait else self.queue.get_nowait()
            except queue.Empty:
                return []
        found = self.session.spark.sql(f"SELECT * FROM `{self.query_id}` OFFSET {self.seen}").collect()
        self.seen += len(found)
        rows = self.changes([tuple(r) for r in found])
        if not rows and wait:
            self.stopped.wait(0.5)
        return rows

    def _input_rows(self) -> int:
        return sum(int(_field(p, "numInputRows") or 0) for p in self.query.recentProgress)

    def _late_rows(self) -> int:
        """Rows the stateful operators dropped for arriving behind the watermark (Spark's
        numRowsDroppedByWatermark, over the query's recent progress)."""
        return sum(int(_field(op, "numRowsDroppedByWatermark") or 0)
                   for p in self.query.recentProgress for op in (_field(p, "stateOperators") or []))

    def rows(self) -> Iterator[tuple]:
        stmt = self.stmt
        deadline = time.monotonic() + stmt.until_seconds if stmt.until_seconds else None
        given = 0
        try:
            ending = False
            while not self.stopped.is_set():
                batch = self._take(wait=not ending)
                if batch:
                    for row in batch:
                        yield row
                        given += 1
                        if stmt.limit is not None and given >= stmt.limit:
                            return
                    continue
                if ending:  # nothing more came after the query ended or read its rows
                    return
                if not self.query.isActive:
                    failure = self.query.exception()
                    if failure is not None:
                        raise spark_error(failure, stmt.script, stmt.start)
                    ending = True  # its last rows may have come since they were last looked for
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    return
                if stmt.until_rows is not None and self._input_rows() >= stmt.until_rows:
                    ending = True
        finally:
            if self.query is not None:
                self.info["late_rows"] = self._late_rows()
            self.stop()

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        if self.query is not None:
            from freshet.spark.session import stop_gracefully

            try:
                stop_gracefully([self.query], timeout_s=10)
            except Exception:  # already stopped with an error, reported by rows()
                pass
            if self.memory:  # the memory sink's rows on the server
                try:
                    self.session.spark.catalog.dropTempView(self.query_id)
                except Exception:  # the server is gone: so are they
                    pass
        shutil.rmtree(self.checkpoint, ignore_errors=True)


def _field(progress, name: str):
    """A field of a query's progress: a dict locally; over Spark Connect an object (a dict too, but of Nones)."""
    value = getattr(progress, name, None)
    return progress.get(name) if value is None and isinstance(progress, dict) else value


def _column_note(defn: Definition, name: str) -> str:
    if name in ("ROWTIME", "ROWPARTITION", "ROWOFFSET"):
        return "(pseudo column)"
    column = defn.column(name)
    if column is None:
        return ""
    notes = []
    if defn.key and name.lower() == defn.key.lower():
        notes.append("key")
    if defn.timestamp and name.lower() == defn.timestamp.lower():
        notes.append("event time")
    if column.expr:
        notes.append(f"AS {column.expr}")
    return ", ".join(notes)


def quiet_query_context_logs() -> None:
    """PySpark logs every SQL error it raises, with the JVM's stack, to stderr; the session reports each one itself
    in one line."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def first_line(error: BaseException) -> str:
    """Spark's message without its plan, its SQL excerpt and its JVM stack."""
    text = str(getattr(error, "desc", None) or error).strip()
    text = text.split("\n\n== SQL", 1)[0].split("\n== SQL", 1)[0]
    line = text.splitlines()[0] if text else type(error).__name__
    line = re.sub(r"\s*SQLSTATE: \w+", "", line)
    line = re.sub(r";\s*$", "", line)
    return line.strip()


_SPARK_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)|line (\d+),? pos (\d+)")


def spark_error(error: BaseException, script: str, start: int) -> SqlError:
    """Spark's error as one line; where Spark names a line and position of the text it was given (which began
    at ``start`` in ``script``), the script's line and column."""
    text = str(getattr(error, "desc", None) or error)
    message = _SPARK_POSITION.sub("", first_line(error)).strip().rstrip(";").strip()
    found = _SPARK_POSITION.search(text)
    if not found:
        return SqlError(message)
    line, pos = (int(g) for g in (found.group(1) or found.group(3), found.group(2) or found.group(4)))
    base_line, base_column = p.position(script, start)
    return SqlError(message, base_line + line - 1, (base_column + pos) if line == 1 else pos + 1)


def default_bootstrap() -> str:
    return os.environ.get("FRESHET_BOOTSTRAP", "127.0.0.1:9092")


__all__ = ["SqlSession", "SqlError", "SQL_TOPIC", "spark_error"]

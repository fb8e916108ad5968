"""Persistent queries: ``CREATE STREAM s AS SELECT ...`` and ``CREATE TABLE t AS SELECT ...`` start a streaming
query that writes a topic until ``TERMINATE query_id``.

- A stream's query runs in append mode: each row once (an aggregation over windows: each window once, when the
  watermark closes it); records are JSON values without a key.
- A table's query runs in update mode (append where Spark allows only that): each changed row of a microbatch is
  written keyed by the table's key, the GROUP BY columns (JSON of those columns, as ``freshet run`` keys its
  topics), to a compacted topic, and upserted into the table's queryable copy (``table_store``), which answers
  pull queries (``SELECT * FROM t WHERE key = ...``).

Writes are exactly once for read_committed readers: every microbatch goes through the transactional sink
(``freshet.pipelines.runner.TopicBatchWriter``: the batch id and a query id stable across restarts commit with the
rows), and the checkpoint (``<data dir>/sql/checkpoints/<query id>``) says where the query stood, so a query killed
-9 and restarted writes each window once. The queries run in the session's Spark with the runner's reporter
(``freshet.spark.registry``): they are listed on the dashboard, which can stop them.

Each query is stored in ``__freshet_sql`` (``query:<id>``: its SQL, sink, topic, keys, checkpoint, status) with its
sink's definition (a stream or table over the topic, queryable as any other), and ``restore(session)`` starts the
stored running queries again (``freshet sql serve``, the dashboard).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

from . import parser as p
from .catalog import Definition
from .errors import SqlError
from .results import Message

RUNNING, TERMINATED = "RUNNING", "TERMINATED"


def _running(session) -> dict:
    """{query id: StreamingQuery} of the persistent queries this session runs."""
    found = getattr(session, "_persistent_queries", None)
    if found is None:
        found = session._persistent_queries = {}
    return found


def _top_level(tokens: list, start: int, stops: set) -> tuple[list[list], int]:
    """The comma-separated items of ``tokens[start:]`` at depth 0, up to the first token of a type in ``stops``
    at depth 0; (items, index of that token)."""
    items: list[list] = [[]]
    depth = 0
    i = start
    while i < len(tokens):
        t = tokens[i]
        if depth == 0 and t.token_type in stops:
            break
        depth += (t.token_type == p.TokenType.L_PAREN) - (t.token_type == p.TokenType.R_PAREN)
        if depth == 0 and t.token_type == p.TokenType.COMMA:
            items.append([])
        else:
            items[-1].append(t)
        i += 1
    return [item for item in items if item], i


def _words(tokens: list) -> list[str]:
    return [("'" + t.text + "'") if t.token_type == p.TokenType.STRING else t.text.lower() for t in tokens]


def group_keys(select: str, columns: list[str]) -> list[str]:
    """The output columns a SELECT groups by: its GROUP BY items matched to the selected items by position
    (``GROUP BY 1``), alias, or the selected expression that holds them (``window(ts, '1 minute').start``, or
    ``window.start`` for Spark's grouping column ``window``); [] without GROUP BY; SqlError when a group
    expression is not selected."""
    T = p.TokenType
    tokens = p.tokenize(select)
    if not tokens or tokens[0].token_type != T.SELECT:
        return []
    selected, at = _top_level(tokens, 1, {T.FROM})
    depth, group_at = 0, None
    for i in range(at, len(tokens)):
        depth += (tokens[i].token_type == T.L_PAREN) - (tokens[i].token_type == T.R_PAREN)
        if depth == 0 and tokens[i].token_type == T.GROUP_BY:
            group_at = i
            break
    if group_at is None:
        return []
    groups, _ = _top_level(tokens, group_at + 1, {T.HAVING, T.ORDER_BY, T.LIMIT, T.UNION, T.QUALIFY})
    star = any(len(item) == 1 and item[0].token_type == T.STAR for item in selected)
    items = []  # (expression text, alias or None, output name)
    for i, item in enumerate(selected):
        alias = None
        if len(item) >= 3 and item[-2].token_type == T.ALIAS:
            alias, item = item[-1].text, item[:-2]
        output = alias or (columns[i] if not star and i < len(columns) else item[-1].text)
        items.append((_words(item), alias, output))
    keys: list[str] = []
    for g in groups:
        text = _words(g)
        found = None
        if len(g) == 1 and g[0].token_type == T.NUMBER and g[0].text.isdigit():
            index = int(g[0].text) - 1
            found = items[index][2] if 0 <= index < len(items) else None
        for expression, alias, output in items if found is None else []:
            windowed = g[0].text.lower() in ("window", "session_window") and len(g) > 1
            held = any(expression[k:k + len(text)] == text for k in range(len(expression) - len(text) + 1))
            if (len(g) == 1 and alias is not None and alias.lower() == g[0].text.lower()) or held \
                    or (windowed and expression[:2] == [g[0].text.lower(), "."]):
                found = output
                break
        if found is None and star and len(g) == 1 and g[0].text in columns:
            found = g[0].text
        if found is None:
            raise SqlError(f"GROUP BY {select[g[0].start:g[-1].end + 1]} is not selected: a table's key is among "
                           "its columns (select it, or name it with AS)")
        if found not in keys:
            keys.append(found)
    return keys


def _query_id(session, kind: str, name: str) -> str:
    prefix = f"{'CTAS' if kind == 'table' else 'CSAS'}_{name.upper()}_"
    taken = [int(q[len(prefix):]) for q in session.catalog.queries() if q.startswith(prefix)
             and q[len(prefix):].isdigit()]
    return f"{prefix}{max(taken, default=0) + 1}"


class Owner:
    """This process as the one serving its persistent queries, seen from elsewhere: a member of a consumer group of
    its own (``__freshet_sql_owner-<id>``), which the broker empties ``SESSION_TIMEOUT_MS`` after the process is
    gone, however it ended (kill -9 too). Over Spark Connect a query runs on the server, which no end of the client
    stops; its sink asks the group each microbatch (``owner_gone``) and stops the query when the group is empty."""

    SESSION_TIMEOUT_MS = 10_000

    def __init__(self, bootstrap: str, timeout_s: float = 60.0) -> None:
        from confluent_kafka import Consumer

        from freshet.client import consumer_config
        from freshet.client.admin import TopicAdmin

        from .catalog import SQL_TOPIC

        TopicAdmin(bootstrap).ensure_topic(SQL_TOPIC, 1, {"cleanup.policy": "compact"})  # a group joins over a topic
        self.group = f"__freshet_sql_owner-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._consumer = Consumer(consumer_config(bootstrap, self.group, {
            "log_level": 0, "session.timeout.ms": self.SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000}))
        joined = threading.Event()
        self._consumer.subscribe([SQL_TOPIC], on_assign=lambda *_: joined.set())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="freshet-sql-owner")
        self._thread.start()
        if not joined.wait(timeout_s):
            self.close()
            raise SqlError(f"cannot join the consumer group that marks this process as the queries' owner in "
                           f"{timeout_s:g} s (is the broker at {bootstrap} up?)")

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._consumer.poll(0.5)  # the records of __freshet_sql are not wanted: the membership is
            except Exception:  # noqa: BLE001 (closing)
                return

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


_OWNER: dict[str, Owner] = {}
_OWNER_LOCK = threading.Lock()


def _owner_group(session) -> str | None:
    """The consumer group that marks this process as the owner of the queries it starts over Spark Connect (made
    once per process and broker); None locally, where a query runs in this process and ends with it."""
    from freshet.spark.session import is_connect

    if not is_connect(session.spark):
        return None
    with _OWNER_LOCK:
        owner = _OWNER.get(session.bootstrap)
        if owner is None:
            import atexit

            owner = _OWNER[session.bootstrap] = Owner(session.bootstrap)
            atexit.register(owner.close)  # leaves the group at once: the queries stop at their next batch
    return owner.group


_ADMINS: dict[str, object] = {}


def owner_gone(bootstrap: str, group: str) -> bool:
    """Whether the owner group ``group`` has no member: the process serving the query is gone. False when the broker
    cannot say (the topic write then fails on its own, and the batch is tried again)."""
    from confluent_kafka.admin import AdminClient

    from freshet.client import admin_config

    admin = _ADMINS.get(bootstrap)
    if admin is None:
        admin = _ADMINS[bootstrap] = AdminClient(admin_config(bootstrap, {"log_level": 0}))
    try:
        described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    except Exception:  # noqa: BLE001 (no answer is no evidence)
        return False
    return not described.members


class OwnerGone(RuntimeError):
    """Raised in a sink whose serving process is gone: the query stops, its batch not written."""


def _announce_stopped(bootstrap: str, query_id: str, reason: str) -> None:
    """The query stopped, in the pipeline registry (the dashboard's list), said from the sink."""
    import json
    import socket

    from confluent_kafka import Producer

    from freshet.client import producer_config
    from freshet.client.pipeline_registry import PIPELINES_TOPIC, ensure_topics

    ensure_topics(bootstrap)
    producer = Producer(producer_config(bootstrap, {"log_level": 0}))
    producer.produce(PIPELINES_TOPIC, json.dumps({
        "name": query_id, "status": "stopped", "host": socket.gethostname(), "updated_ms": int(time.time() * 1000),
        "progress": {}, "dataflow": [], "command": None, "engine": "freshet sql", "reason": reason}).encode(),
        query_id.encode())
    producer.flush(10)


class SqlSink:
    """``foreachBatch``: a microbatch's rows to the topic, exactly once (the transactional sink), then (tables) to
    the queryable copy. ``owner``: over Spark Connect, the group of the process serving the query (``Owner``):
    the batch is refused, which stops the query, when that process is gone."""

    def __init__(self, bootstrap: str, topic: str, sink_id: str, keys: list[str], table: str | None,
                 store=None, owner: str | None = None, query_id: str | None = None) -> None:
        from freshet.pipelines.runner import TopicBatchWriter

        self.writer = TopicBatchWriter(bootstrap, topic, sink_id)
        self.keys, self.table, self.store = keys, table, store
        self.bootstrap, self.owner, self.query_id = bootstrap, owner, query_id

    def __call__(self, df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if self.owner is not None and owner_gone(self.bootstrap, self.owner):
            reason = ("the process serving it is gone: it stays RUNNING in __freshet_sql, and the next "
                      "freshet sql --serve (or the dashboard) starts it again from its checkpoint")
            _announce_stopped(self.bootstrap, self.query_id or "", reason)
            raise OwnerGone(f"query {self.query_id} stopped: {reason}")
        df = df.persist()
        try:
            value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("value")
            if self.keys:
                rows = df.select(F.to_json(F.struct(*[F.col(f"`{k}`") for k in self.keys])).alias("key"), value)
            else:
                rows = df.select(value)
            self.writer(rows, batch_id)
            if self.table is not None:
                self.store.upsert(self.table, [tuple(r) for r in df.collect()])
        finally:
            df.unpersist()


def _reporter(session):
    """The runner's reporter (registry, dashboard, stop requests) on this session's Spark, made once."""
    reporter = getattr(session, "_persistent_reporter", None)
    if reporter is None:
        from freshet.spark.registry import PipelineReporter
        from freshet.spark.session import is_connect

        spark = session.spark
        reporter = PipelineReporter(session.bootstrap, spark, command=None, engine="freshet sql")
        if is_connect(spark):  # no listener runs in a Connect client (see freshet run): progress is polled
            threading.Thread(target=_poll_progress, args=(session, reporter), daemon=True,
                             name="freshet-sql-progress").start()
        else:
            spark.streams.addListener(reporter)
        session._persistent_reporter = reporter
    return reporter


def _poll_progress(session, reporter, every_s: float = 1.0) -> None:
    """Over Spark Connect, what the runner's listener does locally: each persistent query of the session announced
    running with its progress (a new batch's), then stopped or failed; until the reporter is closed."""
    import json

    seen: dict[str, object] = {}
    while not reporter._stop.wait(every_s):
        for query_id, query in list(_running(session).items()):
            try:
                active = query.isActive
                progress = query.lastProgress if active else None
                failure = None if active else query.exception()
            except Exception:  # noqa: BLE001 (the server or session is going away: the next round, or the end)
                continue
            if not active:
                if seen.pop(query_id, None) is not None:
                    reporter.publish(query_id, "failed" if failure is not None else "stopped")
                continue
            progress = json.loads(progress.json) if hasattr(progress, "json") else progress
            batch = (progress or {}).get("batchId")
            if query_id not in seen:
                reporter._ended.discard(query_id)  # started again (TERMINATE, then restored): running anew
            if query_id not in seen or (batch is not None and batch != seen[query_id]):
                reporter.publish(query_id, "running") if not progress else reporter.report_progress(progress)
                seen[query_id] = batch if progress else -1


def _start(session, record: dict, df):
    """Start the streaming query of ``record`` over ``df``; SqlError (nothing left running) when Spark refuses it
    (its AnalysisException or IllegalArgumentException; anything else is raised as it is)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    from freshet.pipelines.runner import shared_path

    from .session import spark_error
    from .table_store import store_for

    table = record["sink"] if record["kind"] == "table" else None
    store = store_for(session) if table else None
    sink = SqlSink(session.bootstrap, record["topic"], f"sql|{record['id']}", record["keys"], table, store,
                   owner=_owner_group(session), query_id=record["id"])
    modes = ["update", "append"] if record["kind"] == "table" else ["append"]
    _reporter(session)
    last = None
    for mode in modes:
        writer = (df.writeStream.outputMode(mode).foreachBatch(sink)
                  .option("checkpointLocation", shared_path(record["checkpoint"])).queryName(record["id"])
                  .trigger(processingTime=f"{record.get('trigger_seconds', 1.0)} seconds"))
        try:
            query = _started(writer)
            _running(session)[record["id"]] = query
            return query
        except (AnalysisException, IllegalArgumentException) as e:  # Spark refuses this output mode: the next
            last = e
            if "output mode" not in str(e).lower() and "outputmode" not in str(e).lower():
                break
    raise spark_error(last, record["sql"], 0)


# Spark gives the Python worker of a foreachBatch sink over Spark Connect 10 s (hard-coded) to start and connect
# back; on a loaded machine a fresh interpreter importing PySpark can take longer
_WORKER_LATE = ("Python worker to connect back", "Python worker failed to connect back")


def _started(writer, attempts: int = 5):
    """``writer.start()``, tried again (``attempts`` in all, a moment apart) when the sink's Python worker was too
    slow to start."""
    for attempt in range(attempts):
        try:
            return writer.start()
        except Exception as e:
            if attempt == attempts - 1 or not any(late in str(e) for late in _WORKER_LATE):
                raise
            time.sleep(2.0 * (attempt + 1))
    raise AssertionError("unreachable")


def _columns(df) -> list[p.Column]:
    return [p.Column(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def create_as_select(session, stmt: p.CreateAsSelect) -> Message:
    """``CREATE STREAM|TABLE name [WITH (topic=..., partitions=N)] AS SELECT ...``: check everything, then create
    the topic, store the sink's definition and the query, and start it."""
    from freshet.client.admin import TopicAdmin

    from .table_store import store_for

    name = stmt.name
    existing = session.catalog.get(name)
    if existing is not None:
        if stmt.if_not_exists:
            return Message(f"{existing.kind.capitalize()} {existing.name} already exists")
        writers = [q for q in list_queries(session) if q["sink"].lower() == name.lower() and q["status"] == RUNNING]
        if not stmt.or_replace or writers:
            raise stmt.error(f"a {existing.kind} named {existing.name} already exists"
                             + (f" (written by {writers[0]['id']}: TERMINATE it first)" if writers else
                                f" (DROP {existing.kind.upper()} {existing.name} first, or CREATE OR REPLACE)"))
    unknown = sorted(set(stmt.options) - {"topic", "partitions", "trigger_seconds"})
    if unknown:
        raise stmt.error(f"unknown option {unknown[0]!r}: CREATE ... AS SELECT takes topic, partitions, "
                         "trigger_seconds")
    topic = stmt.options.get("topic", name)
    try:
        partitions = int(stmt.options.get("partitions", "1"))
        trigger = float(stmt.options.get("trigger_seconds", "1"))
        if partitions < 1 or trigger <= 0:
            raise ValueError
    except ValueError:
        raise stmt.error("partitions takes a whole number of at least 1, trigger_seconds a positive number") \
            from None
    df = session.dataframe(stmt.select, stmt.select_start, stmt.script)
    if not df.isStreaming:
        raise stmt.error(f"CREATE {stmt.kind.upper()} ... AS SELECT runs over a stream or table; this query reads "
                         "neither (SHOW STREAMS lists them)")
    keys = group_keys(stmt.select, df.columns) if stmt.kind == "table" else []
    if stmt.kind == "table" and not keys:
        raise stmt.error("CREATE TABLE ... AS SELECT needs a GROUP BY: the table holds one row per group key "
                         "(for every row of a stream: CREATE STREAM ... AS SELECT)")
    admin = TopicAdmin(session.bootstrap)
    topics = admin.list_topics()
    if topic in topics and existing is None and any(d.topic == topic for d in session.catalog.definitions()):
        raise stmt.error(f"topic {topic!r} is already the topic of another stream or table: WITH (topic='...')")
    query_id = _query_id(session, stmt.kind, name)
    from .table_store import data_dir

    record = {"id": query_id, "sql": stmt.text, "kind": stmt.kind, "sink": name, "topic": topic, "keys": keys,
              "status": RUNNING, "checkpoint": os.path.join(data_dir(session), "sql", "checkpoints", query_id),
              "trigger_seconds": trigger, "created_ms": int(time.time() * 1000)}
    columns = _columns(df)
    if stmt.kind == "table":
        store_for(session).define(name, [(c.name, c.type) for c in columns], keys)
    created = ""
    if topic not in topics:
        admin.create_topic(topic, partitions, {"cleanup.policy": "compact"} if stmt.kind == "table" else {})
        created = f", topic {topic} created"
    try:
        _start(session, record, df)
    except Exception as e:  # Spark refused the query (or it could not start): what was made for it goes
        if created:
            admin.delete_topic(topic)
        if stmt.kind == "table":
            store_for(session).drop(name)
        if not isinstance(e, SqlError):
            raise
        if stmt.kind == "stream" and "output mode" in e.message.lower():
            raise stmt.error(f"{e.message} (a stream is written a row once: aggregate over windows of an event "
                             "time with a watermark, or CREATE TABLE ... AS SELECT)") from None
        raise
    key = keys[0] if len(keys) == 1 else None
    if len(keys) > 1:  # a table's key is one column: the group key's JSON, as the topic's record key holds it
        key = "ROWKEY"
        columns.append(p.Column("ROWKEY", None, "to_json(named_struct("
                                + ", ".join(f"'{k}', `{k}`" for k in keys) + "))"))
    session.catalog.put(Definition(stmt.kind, name, topic, "json", columns, key=key, text=stmt.text))
    session.catalog.put_query(query_id, record)
    return Message(f"Created query with ID {query_id}: {stmt.kind} {name} written to topic {topic}{created}")


def terminate(session, query_id: str) -> Message:
    """``TERMINATE id`` (or ``TERMINATE ALL``): stop the query (here, or through the registry where another
    process runs it) and mark it terminated; its topic and definition stay."""
    from freshet.client.pipeline_registry import request_stop

    stored = session.catalog.queries()
    if query_id.upper() == "ALL":
        ids = [i for i, q in stored.items() if q.get("status") == RUNNING]
        if not ids:
            return Message("No query is running: nothing terminated.")
    else:
        match = [i for i in stored if i.lower() == query_id.lower()]
        if not match:
            raise SqlError(f"no query {query_id}; SHOW QUERIES lists them")
        ids = match
    for i in ids:
        running = _running(session).pop(i, None)
        if running is not None:
            from freshet.spark.session import stop_gracefully

            stop_gracefully([running], timeout_s=30)
        else:
            request_stop(session.bootstrap, i)
        session.catalog.put_query(i, dict(stored[i], status=TERMINATED, terminated_ms=int(time.time() * 1000)))
    return Message(f"Query {ids[0]} terminated." if len(ids) == 1 else f"{len(ids)} queries terminated.")


def list_queries(session) -> list[dict]:
    """The stored persistent queries (SHOW QUERIES, DESCRIBE): their record, with the status of those this
    session runs as Spark sees it (ERROR: the query failed, with its error)."""
    out = []
    for query_id, record in sorted(session.catalog.queries().items()):
        record = dict(record, id=query_id)
        running = _running(session).get(query_id)
        if running is not None and not running.isActive and record.get("status") == RUNNING:
            failure = running.exception()
            if failure is not None:
                record.update(status="ERROR", error=str(failure).splitlines()[0])
            else:  # stopped from elsewhere (the dashboard): not to be started again
                record.update(status=TERMINATED, terminated_ms=int(time.time() * 1000))
            session.catalog.put_query(query_id, record)
            _running(session).pop(query_id, None)
        out.append(record)
    return out


_STORED = ("sql", "kind", "sink", "topic", "keys", "checkpoint")


def restore(session) -> list[str]:
    """Start again every stored query marked running that this session does not run yet (after a restart);
    returns their ids. A query its stored definition can no longer start (its SQL no longer parses, its source was
    dropped or changed, Spark refuses it: SqlError, Spark's AnalysisException or IllegalArgumentException; a record
    without its fields) is marked ERROR with the first line of the reason, and the others still start. Anything else
    (a bug, the Spark Connect server gone) is raised: it is no fault of the query's, and the query stays RUNNING,
    to be started by the next restore."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    started = []
    for query_id, record in sorted(session.catalog.queries().items()):
        if record.get("status") != RUNNING or query_id in _running(session):
            continue
        missing = [f for f in _STORED if f not in record]
        try:
            if missing:
                raise SqlError(f"the stored query has no {missing[0]!r} (stored by another version?): CREATE it "
                               "again")
            stmt = p.parse_one(record["sql"])
            if not isinstance(stmt, p.CreateAsSelect):
                raise SqlError("the stored SQL is not CREATE STREAM|TABLE ... AS SELECT")
            df = session.dataframe(stmt.select, stmt.select_start, stmt.script)
            _start(session, dict(record, id=query_id), df)
        except (SqlError, AnalysisException, IllegalArgumentException) as e:
            session.catalog.put_query(query_id, dict(record, status="ERROR", error=_one_line(e)))
            continue
        started.append(query_id)
    return started


def _one_line(error: Exception) -> str:
    """The reason a query cannot start, in one line (Spark's message without its plan and stack)."""
    if isinstance(error, SqlError):
        return str(error).strip().splitlines()[0] if str(error).strip() else "SqlError"
    from .session import first_line

    return first_line(error)


def wait(session, stop: threading.Event | None = None, poll_s: float = 1.0) -> None:
    """Keep the session's persistent queries running until ``stop`` is set (or none is left running)."""
    while not (stop is not None and stop.wait(poll_s)):
        if stop is None:
            time.sleep(poll_s)
        if not any(q.isActive for q in _running(session).values()):
            return

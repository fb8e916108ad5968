"""Projections: read models derived from the events, written exactly once to SQLite or PostgreSQL.

A projection declares its tables and handles events::

    class Roster(Projection):
        name = "roster"
        tables = {"students": "course TEXT, student TEXT, PRIMARY KEY (course, student)"}

        def handle(self, recorded, db):
            if isinstance(recorded.event, Enrolled):
                db.execute("INSERT INTO {students} VALUES (?, ?)", (recorded.aggregate_id, recorded.event.student_id))

SQL names tables in braces (the projection's own tables) and uses ``?`` placeholders on both databases.
Readers query a view named ``{projection}_{table}``; it points at the current *generation* of the table.
Every batch of events is written in one database transaction together with the projection's position
(the next offset per partition), so a crash never applies an event twice or skips one. A rebuild
(``rebuild``) replays from offset 0 into a new generation while the old one keeps serving, then swaps the
views in one transaction.

A projection may also take the events a batch at a time (``handle_batch(events, db)``, in log order per
partition): net effects computed in Python and written with ``executemany`` are several times faster than
statements one event at a time (a SQLite statement costs ~10 us here, whatever it does). The default calls
``handle`` on each.

When a data subject is forgotten (a tombstone on the keys topic), ``forget(subject, db)`` is called so live
rows can show the placeholder at once; a rebuild shows it anyway (the events no longer open).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from freshet.client import consumer_config, producer_config
from freshet.client.application_registry import REGISTRY_TOPIC, ensure_registry, projection_record
from freshet.client.reading import drain, read_committed_ranges

from .aggregate import Application
from .events import RecordedEvent
from .keys import SubjectKeys

if TYPE_CHECKING:
    from freshet.client.columnar import Records

POSITIONS = "freshet_projection_positions"
GENERATIONS = "freshet_projection_generations"


class Database:
    """One connection to SQLite (``sqlite:PATH``) or PostgreSQL (``postgresql://...``), with ``?``
    placeholders on both and explicit transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:"):
            path = url[len("sqlite:"):].removeprefix("//")
            self.conn: Any = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
            self.conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL syncs the log at checkpoints, not at every commit: a commit is still atomic and
            # survives the process dying; a power cut may lose the last commits, rows and positions together,
            # and the runner then applies those events again from the older position (exactly once either way)
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.postgres = False
        elif url.startswith(("postgresql://", "postgres://")) or "dbname=" in url:
            import psycopg2

            self.conn = psycopg2.connect(url)
            self.conn.autocommit = True  # transactions are begun and ended explicitly (``transaction``)
            self.postgres = True
        else:
            raise ValueError(f"database {url!r}: expected sqlite:PATH or postgresql://...")
        self._lock = threading.Lock()

    def close(self) -> None:
        self.conn.close()

    def execute(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        if self.postgres:
            with self.conn.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        cur = self.conn.execute(sql, params)
        return cur.fetchall() if cur.description else []

    def executemany(self, sql: str, rows: list) -> None:
        if self.postgres:
            from psycopg2.extras import execute_batch

            with self.conn.cursor() as cur:  # many statements per round trip, not one each
                execute_batch(cur, sql.replace("?", "%s"), rows, page_size=500)
        else:
            self.conn.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        with self._lock:
            begin = "BEGIN" if self.postgres else "BEGIN IMMEDIATE"
            self.execute(begin)
            try:
                yield self
            except BaseException:
                self.execute("ROLLBACK")
                raise
            self.execute("COMMIT")

    def ensure_bookkeeping(self) -> None:
        self.execute(f"CREATE TABLE IF NOT EXISTS {GENERATIONS} (projection TEXT PRIMARY KEY, generation INTEGER)")
        self.execute(f"CREATE TABLE IF NOT EXISTS {POSITIONS} (projection TEXT, generation INTEGER, topic TEXT, "
                     "part INTEGER, next_offset BIGINT, PRIMARY KEY (projection, generation, topic, part))")

    def current_generation(self, projection: str) -> int | None:
        rows = self.execute(f"SELECT generation FROM {GENERATIONS} WHERE projection = ?", (projection,))
        return rows[0][0] if rows else None

    def positions(self, projection: str, generation: int) -> dict[tuple[str, int], int]:
        rows = self.execute(f"SELECT topic, part, next_offset FROM {POSITIONS} WHERE projection = ? AND "
                            "generation = ?", (projection, generation))
        return {(t, p): o for t, p, o in rows}


class Writer:
    """What a projection's handlers write through: the database, with ``{table}`` names resolved."""

    def __init__(self, db: Database, tables: dict[str, str]) -> None:
        self.db, self.tables = db, tables
        self._sql: dict[str, str] = {}

    def resolve(self, sql: str) -> str:
        resolved = self._sql.get(sql)
        if resolved is None:
            resolved = self._sql[sql] = sql.format(**self.tables)
        return resolved

    def execute(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        return self.db.execute(self.resolve(sql), params)

    def executemany(self, sql: str, rows: list) -> None:
        if rows:
            self.db.executemany(self.resolve(sql), rows)


class Projection:
    """A read model. Subclasses set ``name`` and ``tables`` and implement ``handle``."""

    name: ClassVar[str] = ""
    tables: ClassVar[dict[str, str]] = {}  # table -> column definitions
    # True when what a handler writes for an event depends only on the events of the same aggregate (and on
    # updates that commute, like counters), and handlers keep no state outside their tables: then events of
    # different partitions may be applied in any interleaving, and a rebuild splits the partitions over
    # processes (``rebuild(workers=...)``), as a consumer group splits them over its members
    keyed_by_aggregate: ClassVar[bool] = False

    def handle(self, recorded: RecordedEvent, db: Writer) -> None:
        raise NotImplementedError

    def handle_batch(self, events: list[RecordedEvent], db: Writer) -> None:
        """The events of one batch, in log order per partition (override to write set-wise)."""
        for recorded in events:
            self.handle(recorded, db)

    def forget(self, subject: str, db: Writer) -> None:
        """A data subject was forgotten: replace what the rows hold of them (default: nothing to do)."""


def physical_tables(projection: type[Projection], generation: int) -> dict[str, str]:
    return {t: f"{projection.name}_{t}_g{generation}" for t in projection.tables}


def _point_views(db: Database, projection: type[Projection], generation: int) -> None:
    for table, physical in physical_tables(projection, generation).items():
        db.execute(f"DROP VIEW IF EXISTS {projection.name}_{table}")
        db.execute(f"CREATE VIEW {projection.name}_{table} AS SELECT * FROM {physical}")


class ProjectionRunner:
    """Feeds one generation of a projection from the events (and the keys topic, for forgetting)."""

    def __init__(self, app: Application, projection: type[Projection], database_url: str, bootstrap: str,
                 generation: int | None = None, partitions: Sequence[int] | None = None, forgets: bool = True,
                 keys: SubjectKeys | None = None) -> None:
        """``partitions``: the events partitions this runner feeds (all by default); ``forgets``: whether it
        also follows the keys topic's tombstones (one runner per generation should). A rebuild's workers
        each take a share of the partitions (``rebuild(workers=...)``). ``keys``: subject keys already read."""
        self.app, self.projection_cls, self.bootstrap = app, projection, bootstrap
        self.partitions = list(range(app.partitions)) if partitions is None else sorted(partitions)
        self.forgets = forgets
        self.database_url = database_url
        self.projection = projection()
        self.db = Database(database_url)
        self.db.ensure_bookkeeping()
        current = self.db.current_generation(projection.name)
        self.live = generation is None  # the live runner follows the generation a rebuild swaps in
        if generation is None:
            generation = 1 if current is None else current
        self.generation = generation
        self.writer = Writer(self.db, physical_tables(projection, generation))
        with self.db.transaction():
            for physical, (_, columns) in zip(self.writer.tables.values(), projection.tables.items()):
                self.db.execute(f"CREATE TABLE IF NOT EXISTS {physical} ({columns})")
            if current is None:
                self.db.execute(f"INSERT INTO {GENERATIONS} VALUES (?, ?)", (projection.name, generation))
                _point_views(self.db, projection, generation)
        self.keys = keys if keys is not None else SubjectKeys(bootstrap, app.keys_topic).load()
        self._consumer: Consumer | None = None  # made when first needed: a rebuild's workers read in bulk only
        self._expected: dict[tuple[str, int], int] = {}
        self._end: dict[tuple[str, int], int] = {}  # where the reader found each partition's end
        self._stop = threading.Event()
        self.applied = 0
        self._announcer: Producer | None = None
        self._announced_at = 0.0
        self._announced: dict[int, int] | None = None
        if self.live:  # the live runner shows its position and lag on the dashboard; a rebuild does not
            ensure_registry(bootstrap)
            self._announcer = Producer(producer_config(bootstrap, {"log_level": 0, "linger.ms": 50}))

    def position(self) -> dict[int, int]:
        """Next offset per events partition: past the transaction markers where the reader found the end."""
        return {p: max(self._expected.get((t, p), 0), self._end.get((t, p), 0))
                for t, p in self._inputs() if t == self.app.events_topic}

    def announce(self, force: bool = False) -> None:
        """Publish the position to ``__freshet_applications`` (at most once a second unless forced)."""
        if self._announcer is None or (not force and time.monotonic() - self._announced_at < 1.0):
            return
        self._announced_at, self._announced = time.monotonic(), self.position()
        key, value = projection_record(self.app.name, self.projection_cls.name, self.generation, self.position(),
                                       self.applied, self.database_url)
        self._announcer.produce(REGISTRY_TOPIC, value, key)
        self._announcer.poll(0)

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.bootstrap, f"freshet-projection-{uuid.uuid4().hex[:8]}", {
                "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 0,
                # a rebuild ends when every partition has come back empty: the broker holds an empty fetch this
                # long (librdkafka's default of 500 ms was added to every rebuild)
                **({} if self.live else {"fetch.wait.max.ms": 10})}))
        return self._consumer

    def close(self) -> None:
        if self._announcer is not None:
            self.announce(force=True)
            self._announcer.flush(5)
        if self._consumer is not None:
            self._consumer.close()
        self.keys.close()
        self.db.close()

    def stop(self) -> None:
        self._stop.set()

    def _inputs(self) -> list[tuple[str, int]]:
        return [(self.app.events_topic, p) for p in self.partitions] + ([(self.app.keys_topic, 0)] if self.forgets
                                                                       else [])

    def _load_positions(self) -> None:
        stored = self.db.positions(self.projection_cls.name, self.generation)
        self._expected = {tp: stored.get(tp, 0) for tp in self._inputs()}
        self._end = {}

    def _assign(self) -> None:
        """The consumer at the positions, or past the transaction markers where the reader found an end."""
        self.consumer.assign([TopicPartition(t, p, max(o, self._end.get((t, p), 0)))
                              for (t, p), o in self._expected.items()])

    def run(self, until_caught_up: bool = False, timeout_s: float | None = None) -> int:
        """Apply events until ``stop()`` (or until every input partition is at its end, with
        ``until_caught_up``). Returns the number of events applied. What the log holds at the start is
        applied in bulk first (``catch_up``), then the consumer follows from there."""
        self._load_positions()
        self.catch_up()
        at_end: set[tuple[str, int]] = set()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"projection {self.projection_cls.name} did not catch up in {timeout_s:.0f} s")
            batch = []
            for m in drain(self.consumer, 5000, 0.2):
                err = m.error()
                if err is None:
                    batch.append(m)
                    at_end.discard((m.topic(), m.partition()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add((m.topic(), m.partition()))
                    self._end[(m.topic(), m.partition())] = m.offset()
            if batch and self._apply(self._rows(batch)):
                self._assign()  # another writer moved the positions (_apply took theirs): go on from there
            caught_up = not batch and len(at_end) == len(self._expected)
            self.announce(force=caught_up and self.position() != self._announced)
            if until_caught_up and len(at_end) == len(self._expected) and not batch:
                break
        return self.applied

    def catch_up(self) -> None:
        """Apply every committed record from the positions to where the inputs end now, a partition's chunk
        at a time, through the columnar reader (no Message object per record; nothing to do where it does
        not serve the client's settings), and leave the consumer assigned there."""
        self._bulk()
        self._assign()

    def _bulk(self) -> None:
        """``catch_up`` without the consumer: apply what the inputs hold now, from the positions; where
        another writer moved them (``_apply`` then takes theirs), again from there."""
        while True:
            bulk = read_committed_ranges(self.bootstrap, dict(self._expected))
            if bulk is None:
                return
            chunks, ends = bulk
            for chunk in chunks:
                if self._stop.is_set():
                    return
                if self._apply(chunk):
                    break
            else:
                self._end.update(ends)  # read to the ends: past any transaction markers there
                return

    @staticmethod
    def _rows(batch: list[Message]) -> list[tuple]:
        return [(m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value()) for m in batch]

    def _apply(self, rows: list[tuple] | Records) -> bool:
        """Apply records (topic, partition, offset, timestamp ms, key, value), or a chunk of one partition's,
        and store the positions past them, in one database transaction. True (and nothing applied) when another
        writer moved the positions."""
        from freshet.client.columnar import Records  # here: readers that never catch up in bulk never load it

        name, codec = self.projection_cls.name, self.app.codec
        decoded = None
        if isinstance(rows, Records) and rows.topic != self.app.keys_topic:
            # events of one partition, decoded together and before the transaction: a rebuild's workers
            # share one database, and decoding is most of the work
            decoded = codec.decode_events(rows.values, self.keys, rows.partition, rows.offsets, rows.timestamps_ms)
        with self.db.transaction():
            if self.live and self.db.current_generation(name) != self.generation:
                self.generation = self.db.current_generation(name)
                self.writer = Writer(self.db, physical_tables(self.projection_cls, self.generation))
            stored = self.db.positions(name, self.generation)
            if any(stored.get(tp, 0) != o for tp, o in self._expected.items()):
                moved = True  # another writer (a rebuild's swap, a second runner) moved the positions
            else:
                moved = False
                pending: list[RecordedEvent] = []
                keys_topic, decode = self.app.keys_topic, codec.decode_event
                expected, keys = self._expected, self.keys
                if isinstance(rows, Records):
                    if decoded is not None:
                        self._handle(decoded)
                        expected[(rows.topic, rows.partition)] = rows.offsets[-1] + 1
                        rows = []
                    else:
                        n = len(rows.offsets)
                        rows = zip([rows.topic] * n, [rows.partition] * n, rows.offsets, rows.timestamps_ms,
                                   rows.keys, rows.values)
                for topic, partition, offset, timestamp_ms, key, value in rows:
                    if topic == keys_topic:
                        if value is None:  # forgotten: after the events before it, before those after
                            self._handle(pending)
                            self.projection.forget(key.decode().rsplit("/", 1)[0], self.writer)
                    else:
                        pending.append(decode(value, keys, partition, offset, timestamp_ms))
                    expected[(topic, partition)] = offset + 1
                self._handle(pending)
                for (topic, part), offset in self._expected.items():
                    if stored.get((topic, part)) != offset:
                        self._store_position(topic, part, offset, (topic, part) in stored)
        if moved:
            self._load_positions()
        return moved

    def _handle(self, pending: list[RecordedEvent]) -> None:
        if pending:
            self.projection.handle_batch(pending, self.writer)
            self.applied += len(pending)
            pending.clear()

    def _store_position(self, topic: str, part: int, offset: int, exists: bool) -> None:
        name = self.projection_cls.name
        if exists:
            self.db.execute(f"UPDATE {POSITIONS} SET next_offset = ? WHERE projection = ? AND generation = ? AND "
                            "topic = ? AND part = ?", (offset, name, self.generation, topic, part))
        else:
            self.db.execute(f"INSERT INTO {POSITIONS} VALUES (?, ?, ?, ?, ?)",
                            (name, self.generation, topic, part, offset))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cycle collector off for a bounded bulk job: it scanned the young objects (decoded events, rows)
    every 700 allocations, 12% of a rebuild's time; reference counting still frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def rebuild(app: Application, projection: type[Projection], database_url: str, bootstrap: str,
            timeout_s: float = 600.0, workers: int | None = None) -> tuple[int, int]:
    """Replay every event from offset 0 into a new generation of the projection's tables, then point the
    views at it and drop the old generation, in one transaction. Returns (generation, events applied).

    ``workers`` > 1 splits the events partitions over that many forked processes for the bulk of the
    replay (decoding and opening sealed fields is most of a rebuild's time), each writing its own
    partitions' rows and positions in its own transactions; this process then reads what came since and
    swaps. Only for projections that are ``keyed_by_aggregate``: the workers' transactions interleave in no
    fixed order across partitions. By default a projection that says so gets one worker per core (at most
    one per partition), any other one."""
    if workers is None:
        workers = default_rebuild_workers(app, projection)
    if workers < 1:
        raise ValueError("workers must be 1 or more")
    if workers > 1 and not projection.keyed_by_aggregate:
        raise ValueError(f"projection {projection.name} is not keyed by aggregate: its events are applied in "
                         "one process (workers=1)")
    db = Database(database_url)
    try:
        db.ensure_bookkeeping()
        current = db.current_generation(projection.name) or 0
        generation = current + 1
        with db.transaction():  # a rebuild that died half-way left its generation behind: start it afresh
            for physical in physical_tables(projection, generation).values():
                db.execute(f"DROP TABLE IF EXISTS {physical}")
            db.execute(f"DELETE FROM {POSITIONS} WHERE projection = ? AND generation = ?",
                       (projection.name, generation))
    finally:
        db.close()
    with _cyclic_gc_paused():  # a rebuild makes millions of short-lived objects and no garbage cycles
        runner = ProjectionRunner(app, projection, database_url, bootstrap, generation=generation)
        try:
            applied = 0
            if workers > 1 and app.partitions > 1:
                applied = _bulk_in_workers(runner, min(workers, app.partitions), timeout_s)
            applied += runner.run(until_caught_up=True, timeout_s=timeout_s)
            with runner.db.transaction():
                _point_views(runner.db, projection, generation)
                if current:
                    for physical in physical_tables(projection, current).values():
                        runner.db.execute(f"DROP TABLE IF EXISTS {physical}")
                    runner.db.execute(f"DELETE FROM {POSITIONS} WHERE projection = ? AND generation = ?",
                                      (projection.name, current))
                runner.db.execute(f"DELETE FROM {GENERATIONS} WHERE projection = ?", (projection.name,))
                runner.db.execute(f"INSERT INTO {GENERATIONS} VALUES (?, ?)", (projection.name, generation))
        finally:
            runner.close()
    return generation, applied


def default_rebuild_workers(app: Application, projection: type[Projection]) -> int:
    """How many processes ``rebuild`` uses unless told: one per core, at most one per partition, for a
    projection keyed by aggregate; else one."""
    return min(os.cpu_count() or 1, app.partitions) if projection.keyed_by_aggregate else 1


class RebuildError(RuntimeError):
    """A rebuild's worker process failed (its traceback is on stderr): nothing was swapped in."""


def _bulk_in_workers(runner: ProjectionRunner, workers: int, timeout_s: float) -> int:
    """Fork ``workers`` processes, each applying a share of the events partitions in bulk (the first also
    the keys topic) into ``runner``'s generation; returns how many events they applied."""
    context = multiprocessing.get_context("fork")  # the children share the subject keys already read
    procs = []
    for i in range(workers):
        receive, send = context.Pipe(duplex=False)
        proc = context.Process(target=_bulk_worker, daemon=True, name=f"rebuild-{runner.projection_cls.name}-{i}",
                               args=(runner, runner.partitions[i::workers], i == 0, send))
        proc.start()
        send.close()
        procs.append((proc, receive))
    deadline = time.monotonic() + timeout_s
    applied, failed = 0, []
    for proc, receive in procs:
        if receive.poll(max(0.0, deadline - time.monotonic())):
            try:
                applied += receive.recv()
            except EOFError:  # it died before answering
                pass
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
        if proc.exitcode != 0:
            failed.append(f"{proc.name} (exit {proc.exitcode})")
        receive.close()
    if failed:
        raise RebuildError(f"projection rebuild workers failed: {', '.join(failed)}; nothing was swapped in")
    return applied


def _bulk_worker(parent: ProjectionRunner, partitions: list[int], forgets: bool, send) -> None:
    parent.keys.forked()
    runner = ProjectionRunner(parent.app, parent.projection_cls, parent.database_url, parent.bootstrap,
                              generation=parent.generation, partitions=partitions, forgets=forgets,
                              keys=parent.keys)
    try:
        runner._load_positions()
        runner._bulk()
        send.send(runner.applied)
    finally:
        runner.keys.close()  # a consumer it made here, for keys newer than the parent's read
        runner.db.close()


def wait_for(database_url: str, projection: str, partition: int, offset: int, events_topic: str,
             timeout_s: float = 30.0) -> None:
    """Read your own writes: return once the projection's live generation has applied the event at
    ``offset`` of ``partition`` (an ``Answer``'s partition and offset)."""
    db = Database(database_url)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            generation = db.current_generation(projection)
            if generation is not None:
                at = db.positions(projection, generation).get((events_topic, partition), 0)
                if at > offset:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"projection {projection} has not reached offset {offset} of partition "
                                   f"{partition} in {timeout_s:.0f} s")
            time.sleep(0.02)
    finally:
        db.close()

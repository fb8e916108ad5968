"""The PostgreSQL connector: a consistent snapshot, then the change stream, into one compacted topic per table.

Start-up: a replication slot (pgoutput) is created with an exported snapshot; every table is read
inside that snapshot (``op: r``), and the stream then starts exactly at the slot's consistent
point, so no change is missed or applied twice on the way from snapshot to stream. Changes are
produced per transaction in commit order, keyed by primary key, in Debezium's JSON envelope; a
delete is followed by a tombstone. The LSN is acknowledged to PostgreSQL only after the records
are durable in the broker (acks=all, flushed), so after a crash the stream resumes from there:
at-least-once on the wire, and consumers that upsert by key end up exact.
"""

from __future__ import annotations

import json
import logging
import select
import time
from dataclasses import dataclass, field
from typing import Callable

import psycopg2
import psycopg2.errors
import psycopg2.extras
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import ClientError, TopicAdmin, consumer_config, producer_config
from freshet.client.cdc_registry import ANNOUNCE_EVERY_S, CDC_TOPIC, cdc_record
from freshet.client.offsets import watermark_offsets
from freshet.client.postgres import connection
from freshet.client.produce import produce_waiting

from .pgoutput import Begin, Change, Commit, Decoder, Relation, convert

log = logging.getLogger(__name__)

STATE_TOPIC = CDC_TOPIC  # each slot's snapshot state (key: the slot) and the connectors' announcements (cdc/NAME)


class CdcError(Exception):
    """A setup problem the user must fix (no primary key, wal_level, missing table...)."""


@dataclass
class CdcConfig:
    dsn: str
    tables: list[str]  # schema.table
    topic_prefix: str
    bootstrap: str
    slot: str = "freshet"
    publication: str = "freshet_pub"
    partitions: int = 1
    flush_every_events: int = 5000
    flush_every_ms: int = 100
    name: str = ""  # how the console lists it (``__freshet_cdc_state``); default: the slot's name


@dataclass
class Stats:
    snapshot_rows: int = 0
    changes: int = 0
    transactions: int = 0
    acknowledged_lsn: int = 0
    acknowledged_changes: int = 0  # changes durable in the broker and acknowledged to PostgreSQL
    last_change_ms: int | None = None  # the commit time of the last change streamed
    slot_lag_bytes: int | None = None  # the slot's lag as last read (pg_current_wal_lsn() - confirmed_flush_lsn)
    tables: dict = field(default_factory=dict)


def _split(table: str) -> tuple[str, str]:
    schema, _, name = table.rpartition(".")
    return schema or "public", name


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class PostgresConnector:
    def __init__(self, config: CdcConfig, on_progress: Callable[[str, int, int], None] | None = None) -> None:
        self.config = config
        self.on_progress = on_progress
        self.stats = Stats()
        self.decoder = Decoder()
        self.producer = Producer(producer_config(config.bootstrap, {"log_level": 0, "linger.ms": 5,
                                                                     "queue.buffering.max.messages": 1_000_000}))
        self.failures: list = []
        self._stop = False
        self._lag_read_ms: int | None = None
        self.error: str | None = None  # why run() stopped, when it failed
        self.streaming = False  # the snapshot is done and the change stream has started
        self.name = config.name or config.slot
        self._database: dict = {}  # host, port, dbname, user (never the password): what the announcement names
        self._announced_at = 0.0

    # -- topics and state ---------------------------------------------------------------------

    def topic_for(self, schema: str, table: str) -> str:
        return f"{self.config.topic_prefix}.{schema}.{table}"

    def _ensure_topics(self) -> None:
        admin = TopicAdmin(self.config.bootstrap)
        existing = admin.list_topics()
        if STATE_TOPIC not in existing:
            admin.create_topic(STATE_TOPIC, 1, {"cleanup.policy": "compact"})
        for table in self.config.tables:
            topic = self.topic_for(*_split(table))
            if topic not in existing:
                admin.create_topic(topic, self.config.partitions, {"cleanup.policy": "compact"})

    def _read_state(self) -> dict:
        consumer = Consumer(consumer_config(self.config.bootstrap, overrides={"log_level": 0}))
        try:
            _low, high = watermark_offsets(consumer, TopicPartition(STATE_TOPIC, 0), 10)
            consumer.assign([TopicPartition(STATE_TOPIC, 0, 0)])
            state: dict = {}
            position = 0
            deadline = time.monotonic() + 30
            while position < high and time.monotonic() < deadline:
                for m in consumer.consume(1000, 0.5):
                    if m.error() is None:
                        position = m.offset() + 1
                        if m.key() == self.config.slot.encode():
                            state = json.loads(m.value()) if m.value() else {}
            return state
        finally:
            consumer.close()

    def _write_state(self, state: dict) -> None:
        self.producer.produce(STATE_TOPIC, json.dumps(state).encode(), self.config.slot.encode())
        self._flush()

    def _flush(self) -> None:
        left = self.producer.flush(60)
        if self.failures or left:
            raise ClientError(f"{len(self.failures) + left} change events were not delivered"
                              + (f": {self.failures[0].str()}" if self.failures else ""))

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self.failures.append(err)

    # -- events ------------------------------------------------------------------------------

    def _emit(self, op: str, schema: str, table: str, keys: list[str], before: dict | None, after: dict | None,
              lsn: int, xid: int | None, ts_ms: int, snapshot: bool = False) -> None:
        row = after if after is not None else before
        key = json.dumps({k: row.get(k) for k in keys}, sort_keys=True, default=str).encode()
        envelope = {
            "before": before, "after": after, "op": op, "ts_ms": int(time.time() * 1000),
            "source": {"version": "freshet", "connector": "postgresql", "name": self.config.topic_prefix,
                       "db": "", "schema": schema, "table": table, "txId": xid, "lsn": lsn, "ts_ms": ts_ms,
                       "snapshot": "true" if snapshot else "false"},
        }
        topic = self.topic_for(schema, table)
        value = json.dumps(envelope, default=str).encode()
        produce_waiting(self.producer, topic, value, key, on_delivery=self._on_delivery)
        if op == "d":
            self.producer.produce(topic, None, key, on_delivery=self._on_delivery)  # tombstone for compaction
        self.stats.tables[table] = self.stats.tables.get(table, 0) + 1

    # -- setup -------------------------------------------------------------------------------

    def _check_tables(self, conn) -> dict[str, list[str]]:
        keys = {}
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            if cur.fetchone()[0] != "logical":
                raise CdcError("PostgreSQL must run with wal_level=logical")
            for table in self.config.tables:
                schema, name = _split(table)
                cur.execute("SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'r'", (schema, name))
                found = cur.fetchone()
                if found is None:
                    raise CdcError(f"table {schema}.{name} does not exist")
                oid, identity = found
                cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
                            "ORDER BY array_position(i.indkey, a.attnum)", (oid,))
                pk = [r[0] for r in cur.fetchall()]
                if not pk and identity != "f":
                    raise CdcError(f"table {schema}.{name} has no primary key; add one or set "
                                   "REPLICA IDENTITY FULL (then every column is the key)")
                if not pk:
                    cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                                "AND NOT attisdropped ORDER BY attnum", (oid,))
                    pk = [r[0] for r in cur.fetchall()]
                keys[f"{schema}.{name}"] = pk
        return keys

    def _ensure_publication(self, conn, tables: list[str]) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.config.publication,))
            quoted = ", ".join(f'"{s}"."{t}"' for s, t in (_split(x) for x in tables))
            if cur.fetchone() is None:
                cur.execute(f'CREATE PUBLICATION "{self.config.publication}" FOR TABLE {quoted}')
            else:
                cur.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
                            (self.config.publication,))
                have = {r[0] for r in cur.fetchall()}
                missing = [t for t in tables if "%s.%s" % _split(t) not in have]
                if missing:
                    more = ", ".join(f'"{s}"."{t}"' for s, t in (_split(x) for x in missing))
                    cur.execute(f'ALTER PUBLICATION "{self.config.publication}" ADD TABLE {more}')
        conn.commit()

    def _snapshot(self, conn, tables: list[str], keys: dict, snapshot_name: str | None, lsn: int) -> None:
        conn.commit()
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            if snapshot_name:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
            for table in tables:
                schema, name = _split(table)
                cur.execute(f'SELECT count(*) FROM "{schema}"."{name}"')
                total = cur.fetchone()[0]
                cur.execute(f'SELECT a.attname, a.atttypid FROM pg_attribute a WHERE a.attrelid = \'"{schema}"."{name}"\''
                            '::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum')
                columns = cur.fetchall()
                select_list = ", ".join(f'"{c}"::text' for c, _ in columns)
                with conn.cursor(name=f"snap_{name}") as rows:
                    rows.itersize = 5000
                    rows.execute(f'SELECT {select_list} FROM "{schema}"."{name}"')
                    done = 0
                    now = int(time.time() * 1000)
                    for row in rows:
                        after = {c: (None if v is None else convert(oid, v)) for (c, oid), v in zip(columns, row)}
                        self._emit("r", schema, name, keys[f"{schema}.{name}"], None, after, lsn, None, now,
                                   snapshot=True)
                        done += 1
                        self.stats.snapshot_rows += 1
                        if done % 1000 == 0:
                            self.producer.poll(0)
                            self._announce()
                            if self.on_progress:
                                self.on_progress(f"{schema}.{name}", done, total)
                    if self.on_progress:
                        self.on_progress(f"{schema}.{name}", done, total)
        conn.commit()
        conn.set_session(isolation_level="READ COMMITTED", readonly=False)
        self._flush()

    # -- announcements (``freshet.client.cdc_registry``) ---------------------------------------

    def announcement(self) -> dict:
        s = self.stats
        return {"connector": "postgresql", "database": self._database, "slot": self.config.slot,
                "publication": self.config.publication, "tables": list(self.config.tables),
                "topic_prefix": self.config.topic_prefix,
                "topics": [self.topic_for(*_split(t)) for t in self.config.tables],
                "status": "failed" if self.error else "streaming" if self.streaming else "snapshot",
                "error": self.error, "slot_lag_bytes": s.slot_lag_bytes,
                "lag_read_ms": self._lag_read_ms, "last_change_ms": s.last_change_ms,
                "snapshot_rows": s.snapshot_rows, "changes": s.changes, "transactions": s.transactions,
                "acknowledged_lsn": lsn_text(s.acknowledged_lsn) if s.acknowledged_lsn else None,
                "updated_ms": int(time.time() * 1000)}

    def _read_slot_lag(self, conn) -> None:
        """The slot's lag in bytes as PostgreSQL users check it; None while it cannot be read (logged)."""
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
                            "FROM pg_replication_slots WHERE slot_name = %s", (self.config.slot,))
                row = cur.fetchone()
            conn.commit()
            self.stats.slot_lag_bytes = None if row is None or row[0] is None else int(row[0])
            self._lag_read_ms = int(time.time() * 1000)
        except psycopg2.Error as exc:
            log.warning("cannot read the lag of slot %s: %s", self.config.slot, str(exc).strip())
            conn.rollback()
            self.stats.slot_lag_bytes = None

    def _announce(self, conn=None, force: bool = False) -> None:
        """Every ``ANNOUNCE_EVERY_S`` (or now, ``force``): the slot's lag read anew, and the connector announced."""
        now = time.monotonic()
        if not force and now - self._announced_at < ANNOUNCE_EVERY_S:
            return
        self._announced_at = now
        if conn is not None:
            self._read_slot_lag(conn)
        key, value = cdc_record(self.name, self.announcement())
        try:
            self.producer.produce(CDC_TOPIC, value, key)
            self.producer.poll(0)
        except BufferError:  # the change events come first; the next round announces
            pass

    def _withdraw(self) -> None:
        """A clean stop: the announcement's tombstone."""
        self.producer.produce(CDC_TOPIC, None, cdc_record(self.name, None)[0])
        self.producer.flush(10)

    # -- run ---------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop = True

    def run(self, until: Callable[[], bool] | None = None) -> None:
        try:
            self._run(until)
        except KeyboardInterrupt:  # Ctrl-C: a stop the user asked for, as clean as stop()
            try:
                self._withdraw()
            except Exception as also:
                log.warning("cannot withdraw the announcement of connector %s: %s", self.name, also)
            raise
        except Exception as exc:
            if self._database:  # announced: the console shows why it stopped (its last record stays)
                self.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                try:
                    self._announce(force=True)
                    self.producer.flush(5)
                except Exception as also:  # the broker may be what failed
                    log.warning("cannot announce that connector %s failed: %s", self.name, also)
            raise

    def _run(self, until: Callable[[], bool] | None) -> None:
        conn = psycopg2.connect(self.config.dsn)
        keys = self._check_tables(conn)  # refuse bad tables before creating anything
        info = conn.info
        self._database = {"host": info.host, "port": info.port, "dbname": info.dbname, "user": info.user}
        self._ensure_topics()
        self._announce(force=True)
        state = self._read_state()
        repl = psycopg2.connect(self.config.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        cur = repl.cursor()
        with conn.cursor() as c:
            c.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (self.config.slot,))
            slot = c.fetchone()
        self._ensure_publication(conn, self.config.tables)
        if slot is None or not state.get("snapshot_complete"):
            if slot is not None:  # a snapshot that did not finish: start it over
                with conn.cursor() as c:
                    c.execute("SELECT pg_drop_replication_slot(%s)", (self.config.slot,))
                conn.commit()
            cur.execute(f'CREATE_REPLICATION_SLOT "{self.config.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
            _name, consistent_point, snapshot_name, _plugin = cur.fetchone()
            lsn = int(consistent_point.split("/")[0], 16) << 32 | int(consistent_point.split("/")[1], 16)
            log.info("slot %s created at %s; snapshot %s", self.config.slot, consistent_point, snapshot_name)
            self._snapshot(conn, self.config.tables, keys, snapshot_name, lsn)
            state = {"snapshot_complete": True, "tables": sorted(self.config.tables)}
            self._write_state(state)
        else:
            new_tables = [t for t in self.config.tables if t not in state.get("tables", [])]
            if new_tables:  # a table added to the list later: snapshot just that one
                self._snapshot(conn, new_tables, keys, None, 0)
                state = {"snapshot_complete": True, "tables": sorted(self.config.tables)}
                self._write_state(state)
        cur.start_replication(slot_name=self.config.slot, decode=False,
                              options={"proto_version": "1", "publication_names": self.config.publication})
        self.streaming = True
        self._announce(conn, force=True)
        self._stream(cur, keys, until, conn)
        repl.close()
        conn.close()
        self._withdraw()

    def _stream(self, cur, keys: dict, until, conn=None) -> None:
        pending_lsn = 0
        unflushed = 0
        last_flush = time.monotonic()
        xid = None
        tx: list[Change] = []
        while not self._stop and not (until and until()):
            self._announce(conn)
            msg = cur.read_message()
            if msg is None:
                if unflushed and (time.monotonic() - last_flush) * 1000 >= self.config.flush_every_ms:
                    self._acknowledge(cur, pending_lsn)
                    unflushed, last_flush = 0, time.monotonic()
                else:
                    cur.send_feedback()  # keepalive
                select.select([cur], [], [], 0.05)
                continue
            event = self.decoder.decode(msg.payload)
            if isinstance(event, Begin):
                xid, tx = event.xid, []
            elif isinstance(event, Change):
                tx.append(event)
            elif isinstance(event, Commit):
                for change in tx:
                    self._emit_change(change, keys, event.end_lsn, xid, event.commit_ts_ms)
                unflushed += len(tx)
                self.stats.changes += len(tx)
                self.stats.transactions += 1
                self.stats.last_change_ms = event.commit_ts_ms
                pending_lsn = event.end_lsn
                tx = []
                self.producer.poll(0)
                if unflushed >= self.config.flush_every_events:
                    self._acknowledge(cur, pending_lsn)
                    unflushed, last_flush = 0, time.monotonic()
            elif isinstance(event, Relation):
                pass
        if unflushed:
            self._acknowledge(cur, pending_lsn)

    def _emit_change(self, change: Change, keys: dict, lsn: int, xid, ts_ms: int) -> None:
        rel = change.relation
        pk = keys.get(f"{rel.namespace}.{rel.name}") or rel.key_columns
        if change.op == "u" and change.old is not None:
            old_key = {k: change.old.get(k) for k in pk}
            new_key = {k: change.new.get(k) for k in pk}
            if any(k in change.old for k in pk) and old_key != new_key:
                # the primary key changed: a delete of the old key, then a create, as Debezium does
                self._emit("d", rel.namespace, rel.name, pk, change.old, None, lsn, xid, ts_ms)
                self._emit("c", rel.namespace, rel.name, pk, None, change.new, lsn, xid, ts_ms)
                return
        self._emit(change.op, rel.namespace, rel.name, pk, change.old if change.op != "c" else None,
                   change.new, lsn, xid, ts_ms)

    def _acknowledge(self, cur, lsn: int) -> None:
        self._flush()  # durable in the broker first
        cur.send_feedback(flush_lsn=lsn, write_lsn=lsn, reply=True)
        self.stats.acknowledged_lsn = lsn
        self.stats.acknowledged_changes = self.stats.changes


def slot_status(dsn: str, slot: str) -> dict | None:
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT confirmed_flush_lsn, pg_current_wal_lsn(), "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), active "
                    "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
        if row is None:
            return None
        cur.execute("SELECT now() - max(reply_time) FROM pg_stat_replication WHERE application_name IS NOT NULL")
        behind = cur.fetchone()[0]
        return {"slot": slot, "confirmed_flush_lsn": row[0], "current_lsn": row[1], "lag_bytes": int(row[2] or 0),
                "active": row[3], "since_last_reply_s": behind.total_seconds() if behind else None}


def drop_replication_slot(dsn: str, slot: str, wait_s: float = 10.0) -> None:
    """Drop a replication slot once no walsender holds it: a connector that has just stopped leaves its
    server-side backend a moment to exit, and until then PostgreSQL refuses (ObjectInUse)."""
    deadline = time.monotonic() + wait_s
    with connection(dsn, autocommit=True) as conn:
        while True:
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return
            except psycopg2.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

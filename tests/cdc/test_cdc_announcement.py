"""The PostgreSQL connector announces itself in ``__freshet_cdc_state`` (issue 49), as ingest servers and pipelines do in
their registry topics: database (no password), slot, publication, tables, the topics it writes, the replication
slot's lag in bytes as PostgreSQL reports it, the last change's time; a tombstone when it stops cleanly."""

import json
import threading
import time

from freshet.cdc.postgres import CdcConfig, PostgresConnector, drop_replication_slot, slot_status
from freshet.client.cdc_registry import CDC_TOPIC
from freshet.dashboard.registries import Registry, cdc_connector
from freshet.testing.cdc import unique
from freshet.testing.crash import read_everything
from freshet.testing.polling import wait_for


def test_the_connector_announces_its_slot_lag_and_withdraws_on_a_clean_stop(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, note text)")
    cur.execute(f"INSERT INTO {schema}.orders SELECT g, 'n' FROM generate_series(1, 20) g")
    slot, prefix = unique("slot"), unique("p")
    # a password in the DSN (the test server trusts 127.0.0.1 and ignores it) must appear nowhere
    config = CdcConfig(postgres.dsn + " password=never-announced", [f"{schema}.orders"], prefix, broker.bootstrap,
                       slot=slot, publication=unique("pub"),
                       flush_every_events=1_000_000, flush_every_ms=3_600_000)  # nothing acknowledged: the lag grows
    connector = PostgresConnector(config)
    thread = threading.Thread(target=connector.run)
    thread.start()
    registry = Registry(broker.bootstrap, CDC_TOPIC, cdc_connector)
    key = f"cdc/{slot}"

    def announced(predicate) -> dict:
        found = {}

        def check():
            entry = registry.refresh()[0].get(key)
            if entry is not None and predicate(entry):
                found.update(entry)
                return True
            return False

        wait_for(check, 120, f"an announcement of {key}")
        return found

    try:
        first = announced(lambda e: e["status"] == "streaming")
        assert first["name"] == slot and first["connector"] == "postgresql"
        assert first["database"] == {"host": "127.0.0.1", "port": postgres.port, "dbname": postgres.database,
                                     "user": postgres.user}
        assert first["slot"] == slot and first["publication"] == config.publication
        assert first["tables"] == [f"{schema}.orders"] and first["topic_prefix"] == prefix
        assert first["topics"] == [f"{prefix}.{schema}.orders"]
        assert first["snapshot_rows"] == 20 and first["last_change_ms"] is None
        assert isinstance(first["slot_lag_bytes"], int) and first["slot_lag_bytes"] >= 0

        before_ms = int(time.time() * 1000) - 1000
        cur.execute(f"INSERT INTO {schema}.orders SELECT g, repeat('x', 200) FROM generate_series(100, 1099) g")
        changed = announced(lambda e: e["changes"] == 1000 and e["transactions"] == 1
                            and (e["slot_lag_bytes"] or 0) > 200_000)  # 1000 rows of 200+ bytes, unacknowledged
        assert changed["last_change_ms"] >= before_ms
        status = slot_status(postgres.dsn, slot)  # what `freshet cdc status` (pg_replication_slots) says now
        assert changed["slot_lag_bytes"] <= status["lag_bytes"]  # nothing acknowledged since: it only grew
        everything = read_everything(broker.bootstrap, CDC_TOPIC, 1)[0]  # every announcement as written
        assert any(f'"slot": "{slot}"'.encode() in value for value in everything if value)
        assert not any(b"never-announced" in value for value in everything if value)
    finally:
        connector.stop()
        thread.join(60)
    assert not thread.is_alive()
    wait_for(lambda: key not in registry.refresh()[0], 60, "the tombstone of a clean stop")
    registry.close()
    drop_replication_slot(postgres.dsn, slot)


def test_a_connector_that_fails_leaves_a_record_saying_why(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.gone (id int PRIMARY KEY)")
    slot = unique("slot")
    config = CdcConfig(postgres.dsn, [f"{schema}.gone"], unique("p"), broker.bootstrap, slot=slot,
                       publication=unique("pub"))
    connector = PostgresConnector(config)
    failure: list[BaseException] = []

    def run():
        try:
            connector.run()
        except Exception as exc:  # noqa: BLE001 (what the thread ended with)
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    registry = Registry(broker.bootstrap, CDC_TOPIC, cdc_connector)
    try:
        wait_for(lambda: (registry.refresh()[0].get(f"cdc/{slot}") or {}).get("status") == "streaming", 120,
                 "the connector streaming")
        with postgres_admin(postgres.dsn) as admin:  # the walsender ends: the stream breaks
            admin.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s",
                          (slot,))
        thread.join(60)
        assert failure, "the connector went on after its walsender was terminated"
        wait_for(lambda: (registry.refresh()[0].get(f"cdc/{slot}") or {}).get("status") == "failed", 60,
                 "the failed announcement")
        entry = registry.refresh()[0][f"cdc/{slot}"]
        assert entry["error"] and type(failure[0]).__name__ in entry["error"]
        assert json.dumps(entry)  # still a whole record the console lists
    finally:
        connector.stop()
        thread.join(60)
        registry.close()
        drop_replication_slot(postgres.dsn, slot)


class postgres_admin:
    """An autocommit cursor on the test server."""

    def __init__(self, dsn: str) -> None:
        import psycopg2

        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True

    def __enter__(self):
        return self.conn.cursor()

    def __exit__(self, *exc) -> None:
        self.conn.close()


def test_freshet_cdc_postgres_withdraws_its_announcement_on_ctrl_c_and_sigterm(broker, postgres, db, tmp_path):
    import signal
    import subprocess
    import sys

    conn, schema = db
    conn.cursor().execute(f"CREATE TABLE {schema}.items (id int PRIMARY KEY)")
    slot = unique("slot")
    cmd = [sys.executable, "-m", "freshet.cli.main", "cdc", "postgres", "--dsn", postgres.dsn,
           "--tables", f"{schema}.items", "--topic-prefix", unique("p"), "--slot", slot,
           "--publication", unique("pub"), "--bootstrap", broker.bootstrap]
    registry = Registry(broker.bootstrap, CDC_TOPIC, cdc_connector)
    key = f"cdc/{slot}"
    try:
        for stop in (signal.SIGINT, signal.SIGTERM):
            with open(tmp_path / f"connector-{stop.name}.log", "wb") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=log)
                try:
                    wait_for(lambda: (registry.refresh()[0].get(key) or {}).get("status") == "streaming"
                             or proc.poll() is not None, 120, "the connector streaming")
                    assert proc.poll() is None, (tmp_path / f"connector-{stop.name}.log").read_text()
                    proc.send_signal(stop)
                    proc.wait(60)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            wait_for(lambda: key not in registry.refresh()[0], 60, f"the tombstone after {stop.name}")
    finally:
        registry.close()
        drop_replication_slot(postgres.dsn, slot)

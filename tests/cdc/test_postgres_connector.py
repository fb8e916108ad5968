"""The PostgreSQL connector against a real PostgreSQL and a real broker."""

import json
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg2
import psycopg2.errors
import pytest

from freshet.cdc.postgres import CdcConfig, CdcError, PostgresConnector
from freshet.testing.cdc import ChangeFollower, rebuild, run_connector, source_state, unique
from freshet.testing.crash import read_everything
from freshet.testing.polling import wait_for


def test_snapshot_then_stream_with_types_pk_updates_nulls_and_deletes(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.items (id int PRIMARY KEY, name text, price numeric(10,2), tags text[], "
                f"attrs jsonb, blob bytea, at timestamptz, n int[])")
    cur.execute(f"INSERT INTO {schema}.items SELECT g, 'item ' || g, g * 1.25, ARRAY['x', 'y z'], "
                f"jsonb_build_object('g', g), '\\x00ff', '2026-01-01 00:00:00+00', ARRAY[g, NULL] "
                f"FROM generate_series(1, 500) g")
    prefix = unique("p")

    def changes():
        cur.execute(f"UPDATE {schema}.items SET name = 'renamed', price = NULL WHERE id = 3")
        cur.execute(f"DELETE FROM {schema}.items WHERE id = 4")
        cur.execute(f"UPDATE {schema}.items SET id = 9000 WHERE id = 5")  # the key changes
        cur.execute(f"INSERT INTO {schema}.items (id) VALUES (9001)")  # NULLs
        cur.execute(f"ALTER TABLE {schema}.items ADD COLUMN extra text")  # a schema change
        cur.execute(f"INSERT INTO {schema}.items (id, extra) VALUES (9002, 'after alter')")

    config = CdcConfig(postgres.dsn, [f"{schema}.items"], prefix, broker.bootstrap, slot=unique("slot"),
                       publication=unique("pub"))
    connector = run_connector(config, changes, changes=5)
    assert connector.stats.snapshot_rows == 500
    state, events = rebuild(broker.bootstrap, f"{prefix}.{schema}.items")
    expected = source_state(postgres.dsn, f"{schema}.items", ["id"])
    for row in state.values():  # rows written before ADD COLUMN do not carry it: a reader takes NULL
        row.setdefault("extra", None)
    assert state == expected
    assert state['{"id": 9002}']["extra"] == "after alter"
    ops = [e["op"] for e in events]
    assert ops.count("r") == 500 and ops[500:] == ["u", "d", "d", "c", "c", "c"]
    assert events[0]["source"]["snapshot"] == "true" and events[-1]["source"]["snapshot"] == "false"
    assert events[0]["after"]["tags"] == ["x", "y z"] and events[0]["after"]["blob"] == "AP8="
    assert events[0]["after"]["price"] == "1.25" and events[0]["after"]["n"] == [1, None]
    records = read_everything(broker.bootstrap, f"{prefix}.{schema}.items", 1)[0]
    assert records.count(None) == 2  # a tombstone after each delete


def test_table_without_primary_key_is_refused_unless_replica_identity_full(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.nokey (a int, b text)")
    config = CdcConfig(postgres.dsn, [f"{schema}.nokey"], unique("p"), broker.bootstrap, slot=unique("slot"),
                       publication=unique("pub"))
    with pytest.raises(CdcError, match="no primary key"):
        PostgresConnector(config).run()
    cur.execute(f"ALTER TABLE {schema}.nokey REPLICA IDENTITY FULL")
    cur.execute(f"INSERT INTO {schema}.nokey VALUES (1, 'a')")
    run_connector(config, lambda: cur.execute(f"DELETE FROM {schema}.nokey WHERE a = 1"), changes=1)
    state, events = rebuild(broker.bootstrap, f"{config.topic_prefix}.{schema}.nokey")
    assert state == {} and [e["op"] for e in events] == ["r", "d"]
    assert events[1]["before"] == {"a": 1, "b": "a"}  # the whole old row with REPLICA IDENTITY FULL


def test_a_table_added_later_is_snapshotted_alone(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    for t in ("first", "second"):
        cur.execute(f"CREATE TABLE {schema}.{t} (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO {schema}.{t} SELECT g, 'v' FROM generate_series(1, 10) g")
    prefix, slot, pub = unique("p"), unique("slot"), unique("pub")
    first = CdcConfig(postgres.dsn, [f"{schema}.first"], prefix, broker.bootstrap, slot=slot, publication=pub)
    run_connector(first, lambda: None)
    both = CdcConfig(postgres.dsn, [f"{schema}.first", f"{schema}.second"], prefix, broker.bootstrap, slot=slot,
                     publication=pub)
    connector = run_connector(both, lambda: cur.execute(f"UPDATE {schema}.second SET v = 'w' WHERE id = 1"),
                              changes=1)
    assert connector.stats.snapshot_rows == 10  # the new table only
    _, first_events = rebuild(broker.bootstrap, f"{prefix}.{schema}.first")
    assert len(first_events) == 10  # not snapshotted twice
    state, _ = rebuild(broker.bootstrap, f"{prefix}.{schema}.second")
    assert state == source_state(postgres.dsn, f"{schema}.second", ["id"])


def test_writes_during_the_snapshot_appear_exactly_once(broker, postgres, db):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.big (id int PRIMARY KEY, pad text)")
    cur.execute(f"INSERT INTO {schema}.big SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g")
    config = CdcConfig(postgres.dsn, [f"{schema}.big"], unique("p"), broker.bootstrap, slot=unique("slot"),
                       publication=unique("pub"))
    connector = PostgresConnector(config)
    thread = threading.Thread(target=connector.run)
    thread.start()
    writer = psycopg2.connect(postgres.dsn)
    writer.autocommit = True
    wcur = writer.cursor()
    inserted = 0
    while connector.stats.snapshot_rows < 20000 and thread.is_alive():  # write while the snapshot runs
        wcur.execute(f"INSERT INTO {schema}.big VALUES ({100000 + inserted}, 'during')")
        inserted += 1
        time.sleep(0.002)
    topic = f"{config.topic_prefix}.{schema}.big"

    def every_row_captured() -> bool:  # the writes the snapshot did not see arrive through the stream
        state, _ = rebuild(broker.bootstrap, topic)
        return len(state) >= 20000 + inserted

    try:
        wait_for(every_row_captured, 120, "every row in the topic, by the snapshot or the stream", 1.0)
    finally:
        connector.stop()
        thread.join(60)
        writer.close()
    assert inserted > 0
    _, events = rebuild(broker.bootstrap, topic)
    per_key: dict = {}
    for e in events:
        per_key[e["after"]["id"]] = per_key.get(e["after"]["id"], 0) + 1
    assert len(per_key) == 20000 + inserted
    assert set(per_key.values()) == {1}  # in the snapshot or in the stream, never both, never missing


# waits on what the connector does, not on how fast: the deadlines are for a busy machine
@pytest.mark.timeout(1500)
def test_random_concurrent_workload_with_five_kill_9s(broker, postgres, db, tmp_path):
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.accounts (id int PRIMARY KEY, owner text, balance bigint, note text)")
    cur.execute(f"INSERT INTO {schema}.accounts SELECT g, 'o' || g, 100, NULL FROM generate_series(1, 200) g")
    prefix, slot, pub = unique("p"), unique("slot"), unique("pub")
    cmd = [sys.executable, "-m", "freshet.cli.main", "cdc", "postgres", "--dsn", postgres.dsn, "--tables",
           f"{schema}.accounts", "--topic-prefix", prefix, "--slot", slot, "--publication", pub,
           "--bootstrap", broker.bootstrap]
    stop = threading.Event()
    errors = []

    def transaction(wconn, rng, seed):
        with wconn, wconn.cursor() as c:  # one transaction of several statements
            for _ in range(rng.randint(1, 4)):
                k = rng.randint(1, 400)
                roll = rng.random()
                if roll < 0.4:
                    c.execute(f"INSERT INTO {schema}.accounts VALUES (%s, %s, %s, NULL) "
                              f"ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance", (k, f"o{k}", k))
                elif roll < 0.8:
                    c.execute(f"UPDATE {schema}.accounts SET balance = balance + 1, note = %s WHERE id = %s",
                              (f"s{seed}", k))
                else:
                    c.execute(f"DELETE FROM {schema}.accounts WHERE id = %s", (k,))

    def workload(seed):
        rng = random.Random(seed)
        wconn = psycopg2.connect(postgres.dsn)
        try:
            while not stop.is_set():
                try:
                    transaction(wconn, rng, seed)
                except psycopg2.errors.DeadlockDetected:
                    pass  # concurrent transactions over random keys deadlock now and then; PostgreSQL
                    # rolled this one back whole, as an application would see it
                time.sleep(0.002)
        except Exception as exc:  # asserted below
            errors.append(repr(exc))
        finally:
            wconn.close()

    topic = f"{prefix}.{schema}.accounts"
    follower = ChangeFollower(broker.bootstrap, topic)
    writers = [threading.Thread(target=workload, args=(s,)) for s in range(3)]
    for w in writers:
        w.start()
    log = open(tmp_path / "connector.log", "wb")
    try:
        # each run is killed once it has written 300 records of its own (the first: mid-snapshot or just after),
        # however long it takes to start on a busy machine; the writers go on meanwhile
        for _ in range(5):
            start = follower.end()
            proc = subprocess.Popen(cmd, stdout=log, stderr=log)
            try:
                wait_for(lambda: follower.end() >= start + 300 or proc.poll() is not None, 600,
                         "the connector to write 300 records", 0.05)
                assert proc.poll() is None, "the connector exited on its own (connector.log)"
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    finally:
        stop.set()
        for w in writers:
            w.join(30)
    # the last write, after all the others: once its change is in the topic, everything before it is too
    cur.execute(f"INSERT INTO {schema}.accounts VALUES (1000000, 'last', 0, 'the last write')")
    last = json.dumps({"id": 1000000})
    expected = source_state(postgres.dsn, f"{schema}.accounts", ["id"])
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    try:
        wait_for(lambda: follower.poll() >= 0 and last in follower.state, 600, "the last write in the topic", 0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        follower.close()
    assert errors == []
    assert follower.state == expected


def test_the_connector_on_a_secured_cluster_with_only_the_rights_it_needs(postgres, db, tmp_path, monkeypatch):
    """SCRAM over SASL_PLAINTEXT, the connector's user allowed to create, write and read its own topics (prefixed
    ACLs) and its state topic, nothing else: the snapshot and the stream arrive; a topic elsewhere is refused."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    from freshet.client.admin import TopicAdmin
    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    for user in ("admin", "cdc"):
        subprocess.run([sys.executable, "-m", "freshet.cli.main", "users", "add", user, "--password", f"{user}-pw",
                        "--data-dir", str(data)], check=True, capture_output=True)
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.people (id int PRIMARY KEY, name text)")
    cur.execute(f"INSERT INTO {schema}.people VALUES (1, 'ada'), (2, 'grace')")
    prefix = unique("sec")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "SCRAM-SHA-256",
                                "FRESHET_SASL_USERNAME": "admin", "FRESHET_SASL_PASSWORD": "admin-pw"}.items():
            monkeypatch.setenv(variable, value)
        from freshet.client.security import Acl, add_acls

        add_acls(b.bootstrap, [Acl("ALLOW", "User:cdc", "*", op, "topic", name, True)
                               for op in ("CREATE", "WRITE", "READ", "DESCRIBE")
                               for name in (prefix, "__freshet_cdc_state")])  # its topics, and where it keeps LSNs
        monkeypatch.setenv("FRESHET_SASL_USERNAME", "cdc")
        monkeypatch.setenv("FRESHET_SASL_PASSWORD", "cdc-pw")
        config = CdcConfig(postgres.dsn, [f"{schema}.people"], prefix, b.bootstrap, slot=unique("slot"),
                           publication=unique("pub"))
        run_connector(config, lambda: cur.execute(f"UPDATE {schema}.people SET name = 'grace h' WHERE id = 2"),
                      changes=1)
        state, events = rebuild(b.bootstrap, f"{prefix}.{schema}.people")
        assert state == {'{"id": 1}': {"id": 1, "name": "ada"}, '{"id": 2}': {"id": 2, "name": "grace h"}}
        with pytest.raises(Exception, match="not authorized to create topic"):
            TopicAdmin(b.bootstrap).create_topic("elsewhere", 1)

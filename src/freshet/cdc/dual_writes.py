"""The seed's story, runnable: dual writes race; change data capture converges.

Two writers set the same keys concurrently. With dual writes each writes the database, then
(after a moment, as a network call would take) the search index: for a key, writer 1 can set X=A
in the database, writer 2 X=B in the database and the index, then writer 1 X=A in the index: the
database says B, the index says A, forever. Through CDC the writers touch only the database; the
index follows the database's own commit order from its replication log, so it ends equal.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from dataclasses import dataclass

from freshet.client.postgres import connection

from .derived import SearchIndex
from .postgres import CdcConfig, PostgresConnector, drop_replication_slot


@dataclass
class Outcome:
    keys: int
    disagreements: int
    example: tuple[str, str, str] | None  # key, database value, index value


def _workload(dsn: str, table: str, keys: int, rounds: int, writer: str, index_write, seed: int,
              barrier: threading.Barrier) -> None:
    """Each round, both writers set every key, side by side (the barrier lines them up)."""
    rng = random.Random(seed)
    with connection(dsn, autocommit=True) as conn, conn.cursor() as cur:
        for r in range(rounds):
            for k in range(keys):
                key, value = f"k{k}", f"{writer}{r}"
                barrier.wait()
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                            "SET value = EXCLUDED.value", (key, value))
                if index_write is not None:
                    # the second write of a dual write goes over the network: its delay has nothing to do with
                    # the order the database committed in (both writers' database writes are done before either's
                    # index write leaves, so each key's two index writes land in either order, like a coin toss)
                    barrier.wait()
                    time.sleep(rng.random() * 0.01)
                    index_write(key, value)


def _compare(dsn: str, table: str, index: dict[str, str]) -> Outcome:
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT key, value FROM {table}")
        db = dict(cur.fetchall())
    wrong = [(k, v, index.get(k)) for k, v in sorted(db.items()) if index.get(k) != v]
    return Outcome(len(db), len(wrong), wrong[0] if wrong else None)


def dual_writes(dsn: str, keys: int = 20, rounds: int = 3) -> Outcome:
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS dual_kv; CREATE TABLE dual_kv (key text PRIMARY KEY, value text)")
    index = sqlite3.connect(":memory:", check_same_thread=False)
    index.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
    lock = threading.Lock()

    def index_write(key: str, value: str) -> None:
        with lock:
            index.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    barrier = threading.Barrier(2)
    writers = [threading.Thread(target=_workload,
                                args=(dsn, "dual_kv", keys, rounds, name, index_write, seed, barrier))
               for seed, name in enumerate(("A", "B"))]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    return _compare(dsn, "dual_kv", dict(index.execute("SELECT key, value FROM kv")))


def through_cdc(dsn: str, bootstrap: str, index_path: str, keys: int = 20, rounds: int = 3) -> Outcome:
    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS cdc_kv; CREATE TABLE cdc_kv (key text PRIMARY KEY, value text)")
    tag = f"{int(time.time())}"
    config = CdcConfig(dsn, ["public.cdc_kv"], f"dual{tag}", bootstrap, slot=f"dual_{tag}", publication=f"dual_{tag}")
    connector = PostgresConnector(config)
    runner = threading.Thread(target=connector.run)
    runner.start()
    try:
        barrier = threading.Barrier(2)
        writers = [threading.Thread(target=_workload, args=(dsn, "cdc_kv", keys, rounds, name, None, seed, barrier))
                   for seed, name in enumerate(("A", "B"))]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        index = SearchIndex(index_path, f"dual{tag}.public.cdc_kv", ["value"])
        deadline = time.monotonic() + 60
        outcome = None
        while time.monotonic() < deadline:
            time.sleep(0.5)
            index.sync(bootstrap)
            outcome = _compare(dsn, "cdc_kv", {json_key["key"]: row["value"]
                                                for json_key, row in ((_key(k), r) for k, r in index.table().items())})
            if outcome.disagreements == 0:
                break
        return outcome
    finally:
        connector.stop()
        runner.join(60)
        drop_replication_slot(dsn, config.slot)


def _key(text: str) -> dict:
    import json

    return json.loads(text)

"""Search index and cache kept in sync from the change topics; restartable; rebuildable from offset 0."""

import json
import random
import threading
import uuid

import psycopg2
import pytest

from freshet.cdc.derived import Cache, SearchIndex
from freshet.cdc.postgres import CdcConfig, PostgresConnector
from freshet.testing.cdc import source_state
from freshet.testing.cli import freshet, freshet_argv
from freshet.testing.polling import wait_for
from freshet.testing.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


def test_search_index_and_cache_equal_the_source_after_a_random_workload(broker, postgres, redis_server, tmp_path):
    schema = "d" + uuid.uuid4().hex[:8]
    conn = psycopg2.connect(postgres.dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(f"CREATE SCHEMA {schema}")
    cur.execute(f"CREATE TABLE {schema}.articles (id int PRIMARY KEY, title text, body text, views int)")
    words = ["stream", "log", "kafka", "spark", "window", "watermark", "compaction", "replica", "offset", "lag"]
    rng = random.Random(4)
    for i in range(1, 301):
        cur.execute(f"INSERT INTO {schema}.articles VALUES (%s, %s, %s, 0)",
                    (i, " ".join(rng.sample(words, 2)), " ".join(rng.sample(words, 4))))
    prefix = "d" + uuid.uuid4().hex[:6]
    config = CdcConfig(postgres.dsn, [f"{schema}.articles"], prefix, broker.bootstrap, slot="s" + uuid.uuid4().hex[:8],
                       publication="p" + uuid.uuid4().hex[:8])
    connector = PostgresConnector(config)
    runner = threading.Thread(target=connector.run)
    runner.start()
    topic = f"{prefix}.{schema}.articles"
    index = SearchIndex(str(tmp_path / "index.db"), topic, ["title", "body"])
    cache = Cache(redis_server.url, topic)
    try:
        for round_ in range(3):
            for _ in range(200):
                k = rng.randint(1, 350)
                roll = rng.random()
                if roll < 0.3:
                    cur.execute(f"INSERT INTO {schema}.articles VALUES (%s, %s, %s, 0) ON CONFLICT (id) DO UPDATE "
                                f"SET title = EXCLUDED.title", (k, " ".join(rng.sample(words, 2)), "fresh"))
                elif roll < 0.8:
                    cur.execute(f"UPDATE {schema}.articles SET views = views + 1, body = %s WHERE id = %s",
                                (" ".join(rng.sample(words, 3)), k))
                else:
                    cur.execute(f"DELETE FROM {schema}.articles WHERE id = %s", (k,))
            # derived systems catch up in steps, each resuming from its stored position
            index.sync(broker.bootstrap)
            cache.sync(broker.bootstrap)
        expected = source_state(postgres.dsn, f"{schema}.articles", ["id"])
        def caught_up() -> bool:  # the connector has delivered everything
            index.sync(broker.bootstrap)
            cache.sync(broker.bootstrap)
            return index.table() == expected and cache.table() == expected

        wait_for(caught_up, 120, "the index and the cache to equal the table", 0.3)
    finally:
        connector.stop()
        runner.join(60)
    assert index.table() == expected
    assert cache.table() == expected
    some = next(iter(expected.values()))
    assert cache.get({"id": some["id"]}) == some
    hits = index.search("watermark")
    assert hits and all("watermark" in (h["title"] + " " + h["body"]) for h in hits)
    assert {h["id"] for h in index.search("watermark", limit=1000)} == {
        r["id"] for r in expected.values() if "watermark" in f'{r["title"]} {r["body"]}'.split()}

    # a brand-new index, from offset 0 of the compacted topic, rebuilds the same table
    fresh = SearchIndex(str(tmp_path / "rebuilt.db"), topic, ["title", "body"])
    fresh.sync(broker.bootstrap)
    assert fresh.table() == expected
    assert json.loads(json.dumps(fresh.table())) == expected


def test_cli_index_search_and_status(broker, postgres, db, tmp_path):
    import subprocess

    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.notes (id int PRIMARY KEY, text text)")
    cur.execute(f"INSERT INTO {schema}.notes VALUES (1, 'the quick brown fox'), (2, 'a lazy dog')")
    prefix, slot = "c" + uuid.uuid4().hex[:6], "s" + uuid.uuid4().hex[:8]

    connector = subprocess.Popen(freshet_argv("cdc", "postgres", "--dsn", postgres.dsn, "--tables", f"{schema}.notes",
                                              "--topic-prefix", prefix, "--slot", slot, "--publication", "p" + slot,
                                              "--bootstrap", broker.bootstrap),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        topic = f"{prefix}.{schema}.notes"
        db = str(tmp_path / "idx.db")
        def indexed() -> bool:
            r = freshet("cdc", "index", "--topic", topic, "--columns", "text", "--db", db, "-b", broker.bootstrap)
            return r.returncode == 0 and "2 rows indexed" in r.stderr

        wait_for(indexed, 60, "both rows to be indexed", 0.5)
        out = freshet("search", "fox", "--db", db)
        assert out.returncode == 0 and [json.loads(line)["id"] for line in out.stdout.splitlines()] == [1]
        status = freshet("cdc", "status", "--dsn", postgres.dsn, "--slot", slot)
        assert status.returncode == 0 and "lag" in status.stdout
        bad = freshet("search", "AND OR (", "--db", db)
        assert bad.returncode == 1 and bad.stderr.startswith("error: bad search query")
    finally:
        connector.terminate()
        connector.wait(30)
    missing = freshet("cdc", "status", "--dsn", postgres.dsn, "--slot", "no-such-slot")
    assert missing.returncode == 1 and "no replication slot" in missing.stderr
    refused = freshet("cdc", "postgres", "--dsn", postgres.dsn, "--tables", f"{schema}.nope", "--topic-prefix", prefix,
                      "--slot", "s" + uuid.uuid4().hex[:8], "-b", broker.bootstrap)
    assert refused.returncode == 1 and "does not exist" in refused.stderr


def test_dual_writes_disagree_while_cdc_converges(broker, postgres, tmp_path):
    from freshet.cdc.dual_writes import dual_writes, through_cdc

    dual = dual_writes(postgres.dsn, keys=20, rounds=2)
    # each key's last two writes race; both orders are equally likely: all 20 agreeing has odds ~1e-6
    assert dual.disagreements > 0 and dual.keys == 20
    cdc = through_cdc(postgres.dsn, broker.bootstrap, str(tmp_path / "idx.db"), keys=20, rounds=2)
    assert cdc.keys == 20 and cdc.disagreements == 0

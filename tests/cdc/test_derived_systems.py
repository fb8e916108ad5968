"""Search index and cache kept in sync from the change topics; restartable; rebuildable from offset 0."""

import json
import random
import threading
import time
import uuid

import psycopg2
import pytest

from freshet.cdc.derived import Cache, SearchIndex
from freshet.cdc.postgres import CdcConfig, PostgresConnector
from freshet.testing.redis_server import RedisServer
from test_postgres_connector import source_state


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
            time.sleep(1.0)
            # derived systems catch up in steps, each resuming from its stored position
            index.sync(broker.bootstrap)
            cache.sync(broker.bootstrap)
        time.sleep(1.0)
        index.sync(broker.bootstrap)
        cache.sync(broker.bootstrap)
    finally:
        connector.stop()
        runner.join(60)
    expected = source_state(postgres.dsn, f"{schema}.articles", ["id"])
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

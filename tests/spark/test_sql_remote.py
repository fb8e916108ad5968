"""`freshet sql --remote sc://...`: push queries over Spark Connect, where the query runs on the server (its rows
come back through Spark's memory sink), with LIMIT, UNTIL and one row per change. The server is the shared Spark
cluster's (tests/spark/conftest.py), so the test runs beside the other scenarios on it."""

import json
import re

from confluent_kafka import Producer

from freshet.testing.cli import freshet
from freshet.testing.topics import create_topic

T0 = 1_767_225_600_000


def test_push_queries_run_over_spark_connect(broker, topic_name, spark_cluster):
    connect_url = spark_cluster.connect_url
    create_topic(broker.bootstrap, topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(topic_name, json.dumps({"user_id": f"u{i % 3}", "ts": T0 + i * 1000}).encode())
    assert producer.flush(30) == 0
    name = f"remote_{abs(hash(topic_name)) % 10**8}"
    run = freshet(broker, "sql", "--remote", connect_url, "-e", f"""
        CREATE STREAM {name} (user_id STRING, ts BIGINT) WITH (topic='{topic_name}', format='json', timestamp='ts');
        SELECT user_id, count(*) AS n FROM {name} GROUP BY user_id EMIT CHANGES LIMIT 3;
        SELECT count(*) AS total FROM {name} EMIT CHANGES UNTIL 30 ROWS;
        EXPLAIN SELECT count(*) FROM {name} EMIT CHANGES""", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert sorted(re.findall(r"\|(u\d)\s*\|(\d+)\s*\|", out)) == [("u0", "10"), ("u1", "10"), ("u2", "10")]
    assert "Limit reached" in out
    assert re.findall(r"\|(\d+)\s*\|\n", out.split("total", 1)[1]) == ["30"]  # once: a row that did not change
    assert "Aggregate" in out.split("Analyzed Logical Plan", 1)[1]

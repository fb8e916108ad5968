"""`freshet sql --remote sc://...`: push queries over Spark Connect, where the query runs on the server (its rows
come back through Spark's memory sink), with LIMIT, UNTIL and one row per change; and a persistent query (CREATE
TABLE ... AS SELECT) run by `--serve` on the server: its sink (the transactional topic writer and the table's
queryable copy) travels to the server's Python worker, pull queries read the copy, the registry lists it, the
client killed -9 stops it on the server and the next --serve starts it again (each row counted once), and
TERMINATE from another client stops it; a join of two tables is refused in one line there too. The server is the
shared Spark cluster's (tests/spark/conftest.py), so the test runs beside the other scenarios on it."""

import json
import re
import signal
import subprocess
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from freshet.client.groups import GroupAdmin
from freshet.client.pipeline_registry import read_pipelines
from freshet.sql.queries import owner_gone
from freshet.sql.table_store import pull
from freshet.testing.cli import freshet, freshet_argv, one_line_error
from freshet.testing.crash import read_everything
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

T0 = 1_767_225_600_000


def _clicks(broker, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        producer.produce(topic, json.dumps({"user_id": f"u{i % 3}", "ts": T0 + i * 1000}).encode())
    assert producer.flush(30) == 0


@pytest.mark.timeout(900)  # the Connect server starts three queries, one after another, on two shared cores
def test_push_and_persistent_queries_run_over_spark_connect(broker, topic_name, spark_cluster, tmp_path):
    connect_url = spark_cluster.connect_url
    create_topic(broker.bootstrap, topic_name, 2)
    _clicks(broker, topic_name, 30)
    name = f"remote_{abs(hash(topic_name)) % 10**8}"
    table = f"{name}_per_user"
    data_dir = tmp_path / "data"
    out_path = tmp_path / "serve.out"
    script = f"""
        CREATE STREAM {name} (user_id STRING, ts BIGINT) WITH (topic='{topic_name}', format='json', timestamp='ts');
        CREATE TABLE {name}_a (id INT PRIMARY KEY, a STRING) WITH (topic='{topic_name}-a', format='json', partitions=1);
        CREATE TABLE {name}_b (id INT PRIMARY KEY, b STRING) WITH (topic='{topic_name}-b', format='json', partitions=1);
        SELECT user_id, count(*) AS n FROM {name} GROUP BY user_id EMIT CHANGES LIMIT 3;
        SELECT count(*) AS total FROM {name} EMIT CHANGES UNTIL 30 ROWS;
        EXPLAIN SELECT count(*) FROM {name} EMIT CHANGES;
        CREATE TABLE {table} AS SELECT user_id, count(*) AS n FROM {name} GROUP BY user_id"""
    with open(out_path, "w") as out, open(tmp_path / "serve.err", "w") as err:
        serving = subprocess.Popen(freshet_argv("sql", "--remote", connect_url, "--serve", "--data-dir", data_dir,
                                                "-e", script, "--bootstrap", broker.bootstrap), stdout=out, stderr=err)
    try:
        def said() -> str:
            return out_path.read_text()

        wait_for(lambda: "serving persistent queries" in said() or serving.poll() is not None, timeout=600,
                 what="the script run and the persistent query started")
        assert serving.poll() is None, said() + (tmp_path / "serve.err").read_text()[-3000:]
        text = said()
        assert sorted(re.findall(r"\|(u\d)\s*\|(\d+)\s*\|", text)) == [("u0", "10"), ("u1", "10"), ("u2", "10")]
        assert "Limit reached" in text
        assert re.findall(r"\|(\d+)\s*\|\n", text.split("total", 1)[1].split("Analyzed", 1)[0]) == ["30"]
        assert "Aggregate" in text.split("Analyzed Logical Plan", 1)[1]
        query_id = re.search(r"Created query with ID (\S+):", text).group(1)

        # pull queries, answered from the copy the sink keeps in the server's Python worker (same machine here)
        where = SimpleNamespace(data_dir=str(data_dir))

        def pulled() -> dict:
            return {user: (pull(where, f"SELECT n FROM {table} WHERE user_id = '{user}'").rows or [(None,)])[0][0]
                    for user in ("u0", "u1", "u2")}

        def in_topic() -> dict:
            return {row["user_id"]: row["n"] for row in map(json.loads, read_everything(broker.bootstrap, table, 1)[0])}

        wait_for(lambda: pulled() == {"u0": 10, "u1": 10, "u2": 10}, timeout=300, what="the counts in the copy")
        # the runner's registry lists it (polled over Connect, where no listener runs in the client)
        wait_for(lambda: read_pipelines(broker.bootstrap).get(query_id, {}).get("status") == "running",
                 timeout=120, what="the query in the pipeline registry")
        _clicks(broker, topic_name, 30)  # the query keeps running: the next counts come
        wait_for(lambda: pulled() == {"u0": 20, "u1": 20, "u2": 20}, timeout=300, what="the new counts in the copy")
        assert in_topic() == {"u0": 20, "u1": 20, "u2": 20}  # the compacted topic, read_committed

        # the serving client killed -9: its query on the server stops at its next batch (the client's owner group
        # emptied), announced in the registry; the next --serve starts it again from its checkpoint, each row once
        (owner,) = [g for g, _, _ in GroupAdmin(broker.bootstrap).list_groups()
                    if g.startswith(f"__freshet_sql_owner-{serving.pid}-")]
        serving.send_signal(signal.SIGKILL)
        serving.wait(timeout=60)
        wait_for(lambda: owner_gone(broker.bootstrap, owner), timeout=120, what="the killed client's group emptied")
        _clicks(broker, topic_name, 30)  # the query's next batch: refused on the server
        wait_for(lambda: "freshet sql --serve" in read_pipelines(broker.bootstrap).get(query_id, {}).get("reason", ""),
                 timeout=300, what="the killed client's query stopped on the server")
        with open(out_path, "w") as out, open(tmp_path / "serve.err", "w") as err:
            serving = subprocess.Popen(freshet_argv("sql", "--remote", connect_url, "--serve", "--data-dir", data_dir,
                                                    "--bootstrap", broker.bootstrap), stdout=out, stderr=err)
        wait_for(lambda: "serving persistent queries" in said() or serving.poll() is not None, timeout=600,
                 what="the stored query started again")
        assert f"1 persistent query running: {query_id}" in said(), said()
        wait_for(lambda: pulled() == {"u0": 30, "u1": 30, "u2": 30}, timeout=300, what="the counts after the restart")
        assert in_topic() == {"u0": 30, "u1": 30, "u2": 30}
        wait_for(lambda: read_pipelines(broker.bootstrap).get(query_id, {}).get("status") == "running",
                 timeout=120, what="the restarted query in the pipeline registry")

        # TERMINATE from another client: the serving process stops the query on the server; then a join of two
        # tables, refused in one line as locally (the plan read from the server's EXPLAIN), ends that script
        stopped = freshet(broker, "sql", "--remote", connect_url, "--data-dir", data_dir, "-e",
                          f"TERMINATE {query_id}; SHOW QUERIES;\n"
                          f"SELECT x.id, a, b FROM {name}_a x JOIN {name}_b y ON x.id = y.id EMIT CHANGES", timeout=600)
        one_line_error(stopped, "line 2, column 1", "Spark joins no two streaming aggregations")
        assert re.search(rf"\|{query_id}\s*\|TERMINATED\s*\|{table}", stopped.stdout), stopped.stdout
        wait_for(lambda: read_pipelines(broker.bootstrap).get(query_id, {}).get("status") == "stopped",
                 timeout=120, what="the query stopped on the server")
        assert serving.poll() is None
    finally:
        serving.send_signal(signal.SIGTERM)
        code = serving.wait(timeout=120)
    assert code == 0, (tmp_path / "serve.err").read_text()[-3000:]


@pytest.mark.timeout(600)  # a driver of its own, its executors on the shared cluster's workers
def test_sql_with_master_runs_its_queries_on_the_standalone_cluster(broker, topic_name, spark_cluster):
    """`freshet sql --master spark://...`: the driver is the command's, the source's reads run in executors the
    cluster's workers start, as for `freshet run --master`; the master lists the application."""
    create_topic(broker.bootstrap, topic_name, 2)
    _clicks(broker, topic_name, 30)
    name = f"master_{abs(hash(topic_name)) % 10**8}"

    def sql_apps() -> list:
        status = spark_cluster.status()
        return [a["id"] for a in status.get("activeapps", []) + status.get("completedapps", [])
                if a.get("name") == "freshet-sql"]

    before = set(sql_apps())
    ran = freshet(broker, "sql", "--master", spark_cluster.master_url, "-e",
                  f"CREATE STREAM {name} (user_id STRING, ts BIGINT) WITH (topic='{topic_name}', format='json', "
                  f"timestamp='ts');\nSELECT user_id, count(*) AS n FROM {name} GROUP BY user_id "
                  "EMIT CHANGES UNTIL 30 ROWS", timeout=540)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    latest = dict(re.findall(r"\|(u\d)\s*\|(\d+)\s*\|", ran.stdout))
    assert latest == {"u0": "10", "u1": "10", "u2": "10"}, ran.stdout
    wait_for(lambda: set(sql_apps()) - before, timeout=60, what="the application in the master's list")

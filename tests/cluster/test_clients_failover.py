"""Freshet's own clients on a three-broker cluster, given a bootstrap list, while the leader of the partitions
they use is killed -9 mid-way (issue #46): the Spark source and exactly-once topic sink, the CDC connector, event
sourcing's processor and clients, the ingest server, the CLI's commands with a dead broker named first, and the
dashboard's cluster view. Each test restarts the broker it killed before the next one (the module shares one
cluster: every test ends with three brokers and every partition's whole ISR)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic

from freshet.client.offsets import watermark_offsets
from freshet.local.cluster import LocalCluster

from .conftest import DEADLINE, admin
from .test_metadata import created, wait_for

# the tests but the Spark one share this module's cluster on one worker; the Spark one goes where the shared
# SparkSession is (tests/conftest.py groups it with tests/spark: a second group marker would make xdist put it in
# a group of both names, with a session of its own)
one_cluster = pytest.mark.xdist_group("clients-failover")


@pytest.fixture(autouse=True)
def _three_brokers_after(cluster):
    """After each test, every broker running again (the killed one restarted) and every partition's ISR whole."""
    yield
    for node_id in sorted(cluster.nodes):
        if node_id not in cluster.running_nodes():
            cluster.restart(node_id, DEADLINE)
    cluster.wait_until(LocalCluster.fully_replicated, DEADLINE, "every partition's whole ISR")


def topics(cluster, *specs: tuple[str, int]) -> None:
    """Topics of replication factor 3 and min.insync.replicas 2, each partition led once the call returns."""
    created(admin(cluster.bootstrap), *(NewTopic(name, count, 3, config={"min.insync.replicas": "2"})
                                        for name, count in specs))
    for name, count in specs:
        cluster.wait_until(lambda m, n=name, c=count: all(
            (p := cluster.partition(n, i, m)) and p["leader"] >= 0 and len(p["isr"]) == 3 for i in range(c)),
            DEADLINE, f"{name}'s leaders")


def topics_led_by(cluster, leader: int, *names: str) -> None:
    """Two-partition topics of replication factor 3 whose partition 0 ``leader`` leads (partition 1: another)."""
    others = [n for n in sorted(cluster.nodes) if n != leader]
    created(admin(cluster.bootstrap), *(NewTopic(name, 2, replica_assignment=[[leader, *others], [*others, leader]],
                                                 config={"min.insync.replicas": "2"}) for name in names))
    cluster.wait_until(lambda m: cluster.fully_replicated(m) and all(
        cluster.partition(name, 1, m) for name in names), DEADLINE, "the topics' replicas")


def kill_leader(cluster, topic: str, index: int = 0) -> int:
    """kill -9 of the leader of ``topic``-``index``; returns its id once another ISR member leads."""
    leader = cluster.leader(topic, index)
    assert leader >= 0
    cluster.kill(leader)
    cluster.wait_until(lambda m: cluster.partition(topic, index, m)["leader"] not in (-1, leader), DEADLINE,
                       f"a new leader of {topic}-{index}")
    return leader


def dead_first(cluster, dead: int) -> str:
    """A bootstrap list naming the killed broker first, then the live ones."""
    return ",".join([cluster.bootstrap_of(dead)] + [cluster.bootstrap_of(n) for n in sorted(cluster.nodes)
                                                    if n != dead])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def freshet(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "freshet.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=DEADLINE)


@one_cluster
def test_the_cli_with_a_dead_broker_named_first(cluster):
    """The leader of the topic's partition 0, which is also the groups' coordinator (the leader of
    __consumer_offsets), killed -9; every command is then given the dead broker first, then the live ones
    (``freshet transactions`` goes through kafka-python, the rest through librdkafka)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, group = unique("cli"), unique("cli-group")
    finder = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0})
    finder.committed([TopicPartition(topic, 0)], timeout=30)  # FindCoordinator: __consumer_offsets exists
    finder.close()
    coordinator = cluster.wait_until(lambda m: (p := cluster.partition("__consumer_offsets", 0, m)) and
                                     p["leader"] > 0 and p["leader"], DEADLINE, "the groups' coordinator")
    topics_led_by(cluster, coordinator, topic)
    produced = freshet("produce", topic, "-K", ":", "-b", cluster.bootstrap, stdin="".join(
        f"k{i}:before-{i}\n" for i in range(10)))
    assert produced.returncode == 0, produced.stderr
    committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 0})
    committer.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 2)], asynchronous=False)
    committer.close()
    transactional = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": group, "log_level": 0})
    transactional.init_transactions(DEADLINE)
    transactional.begin_transaction()
    transactional.produce(topic, b"in-a-transaction", partition=1)
    transactional.commit_transaction(DEADLINE)

    assert kill_leader(cluster, topic, 0) == coordinator
    cluster.wait_until(lambda m: cluster.partition("__consumer_offsets", 0, m)["leader"] not in (-1, coordinator),
                       DEADLINE, "another coordinator")
    bootstrap = dead_first(cluster, coordinator)

    produced = freshet("produce", topic, "-K", ":", "-b", bootstrap, stdin="".join(
        f"k{i}:after-{i}\n" for i in range(10)))
    assert (produced.returncode, produced.stderr.strip()) == (0, f"produced 10 records to {topic}")
    consumed = freshet("consume", topic, "--from-beginning", "-b", bootstrap)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted([f"before-{i}" for i in range(10)] +
                                                     [f"after-{i}" for i in range(10)] + ["in-a-transaction"])
    transactions = freshet("transactions", "list", "-b", bootstrap)
    assert transactions.returncode == 0 and [line.split()[::2] for line in transactions.stdout.splitlines()
                                             if line.startswith(group)] == [[group, "CompleteCommit"]], (
        transactions.stdout + transactions.stderr)
    listed = freshet("topic", "list", "-b", bootstrap)
    assert listed.returncode == 0 and f"{topic}\t2" in listed.stdout.splitlines(), listed.stdout + listed.stderr
    described = freshet("topic", "describe", topic, "-b", bootstrap)
    assert described.returncode == 0, described.stderr
    rows = table_rows(described.stdout)[:2]  # partition, leader, replicas, isr, log start offset, high watermark
    assert [row[:2] for row in rows] == [["0", str(cluster.leader(topic, 0))], ["1", str(cluster.leader(topic, 1))]]
    assert str(coordinator) not in [row[1] for row in rows] and sum(int(row[5]) for row in rows) == 22
    groups = freshet("groups", "list", "-b", bootstrap)
    assert groups.returncode == 0 and group in groups.stdout, groups.stdout + groups.stderr
    before = freshet("groups", "describe", group, "-b", bootstrap)
    assert before.returncode == 0, before.stderr
    assert [row[:3] for row in table_rows(before.stdout)] == [[topic, "0", "1"], [topic, "1", "2"]]
    reset = freshet("groups", "reset-offsets", group, "--topic", topic, "--to-latest", "-b", bootstrap)
    assert reset.returncode == 0, reset.stdout + reset.stderr
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        ends = [watermark_offsets(reader, TopicPartition(topic, p), 30)[1] for p in (0, 1)]
        committed = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    finally:
        reader.close()
    assert [tp.offset for tp in committed] == ends and sum(ends) == 22  # 21 records and a commit marker


def table_rows(text: str) -> list[list[str]]:
    """The cells of a rich table's body rows."""
    return [[cell.strip() for cell in line.strip("│ ").split("│")] for line in text.splitlines()
            if line.startswith("│")]


@pytest.fixture(scope="session")
def spark():
    """The SparkSession tests/spark and tests/sql share (getOrCreate: the same one on the worker that runs them)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()


def test_a_spark_query_through_the_freshet_source_and_exactly_once_sink_across_a_leader_kill(cluster, spark,
                                                                                               tmp_path):
    """readStream.format("freshet") into writeStream.format("freshet") with exactlyOnce, bootstrapped from all
    three brokers. One broker is the transaction coordinator (the leader of __transaction_state) and leads the
    input's and the output's partition 0: it is killed -9 once the query has written some batches, and the input
    goes on growing: a read_committed reader finds every input record once in the output."""
    from confluent_kafka import Producer

    from freshet.client.produce import produce_records
    from freshet.testing.crash import read_everything

    source, sink = unique("spark-in"), unique("spark-out")
    first_transaction = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique("first"),
                                  "log_level": 0})
    first_transaction.init_transactions(DEADLINE)  # __transaction_state exists: its leader coordinates them all
    coordinator = cluster.wait_until(lambda m: (p := cluster.partition("__transaction_state", 0, m)) and
                                     p["leader"] > 0 and p["leader"], DEADLINE, "the transaction coordinator")
    topics_led_by(cluster, coordinator, source, sink)
    first = [(f"k{i}".encode(), f"v{i}".encode(), None) for i in range(300)]
    produce_records(cluster.bootstrap, source, first)
    query = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 60)
             .load().selectExpr("key", "value")
             .writeStream.format("freshet").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", sink).option("exactlyOnce", "true")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        def written() -> int:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return sum(len(v) for v in read_everything(cluster.bootstrap, sink, 2, timeout_s=30).values())

        wait_for("two microbatches in the output", lambda: written() >= 120)
        assert kill_leader(cluster, source, 0) == coordinator
        produce_records(cluster.bootstrap, source, [(f"k{i}".encode(), f"v{i}".encode(), None)
                                                    for i in range(300, 500)])
        wait_for("every input record in the output", lambda: written() >= 500)
    finally:
        query.stop()
    out = read_everything(cluster.bootstrap, sink, 2, timeout_s=60)
    values = sorted(v.decode() for records in out.values() for v in records)
    assert values == sorted(f"v{i}" for i in range(500))


@one_cluster
def test_the_spark_sources_driver_lists_offsets_right_after_a_leader_kill(cluster):
    """The stream reader's driver side (a long-lived admin client: every microbatch lists the partitions, then
    their ends) asked at once after the leader of a partition was killed -9. The new leader tells the high
    watermark it knew as a follower (0 here: its follower's next fetch had not told it yet) until the other
    follower fetches from it; the reader took that for an end below where the query stood and failed the query
    ("records were lost"). Now it asks again (fetchOffset.numRetries, as Spark's Kafka source) and gets the end."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from freshet.client.produce import produce_records
    from freshet.spark.offsets import SourceError
    from freshet.spark.source import FreshetStreamReader, source_schema

    topic = unique("ends")
    topics(cluster, (topic, 3))
    for option, value in (("fetchOffset.numRetries", "-1"), ("fetchOffset.retryIntervalMs", "soon")):
        with pytest.raises(SourceError, match=f"^{option} must be a whole number"):
            FreshetStreamReader({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic, option: value},
                                source_schema())
    reader = FreshetStreamReader({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                                  "startingOffsets": "earliest", "kafka.isolation.level": "read_committed"},
                                 source_schema())
    start = reader.initialOffset()
    # keyed: keyless records go where the sticky partitioner puts a whole batch (all 90 in one partition, once)
    produce_records(cluster.bootstrap, topic, [(b"k%d" % i, b"x%d" % i, None) for i in range(90)])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert sum(end[topic].values()) == 90 and min(end[topic].values()) > 0
    assert len(reader.partitions(start, end)) >= 1
    kill_leader(cluster, topic, 0)
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    assert reader.partitions(end, end) == []  # nothing new: no task, no "records were lost"


@one_cluster
def test_the_cdc_connector_streams_every_change_once_and_in_order_across_a_leader_kill(cluster, postgres, db):
    """The connector (an idempotent acks=all producer, LSNs acknowledged to PostgreSQL once the records are in the
    log) streams updates of 5 rows, one transaction each, while the leader of its topic is killed -9: every
    change once, in commit order per key."""
    from freshet.cdc.postgres import CdcConfig, PostgresConnector
    from freshet.testing.cdc import ChangeFollower

    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.counters (id int PRIMARY KEY, n int)")
    cur.execute(f"INSERT INTO {schema}.counters SELECT g, 0 FROM generate_series(1, 5) g")
    prefix = unique("cdc")
    topic = f"{prefix}.{schema}.counters"
    topics(cluster, (topic, 1))  # created before the connector, which keeps it (replication factor 3)
    connector = PostgresConnector(CdcConfig(postgres.dsn, [f"{schema}.counters"], prefix, cluster.bootstrap,
                                            slot=unique("slot").replace("-", "_"), publication=unique("pub")))
    thread = threading.Thread(target=connector.run, daemon=True)
    thread.start()
    rounds = 40
    try:
        wait_for("the connector streaming", lambda: connector.streaming or not thread.is_alive())
        assert thread.is_alive(), "the connector stopped"
        for n in range(1, rounds + 1):
            for key in range(1, 6):
                cur.execute(f"UPDATE {schema}.counters SET n = {n} WHERE id = {key}")  # autocommit: one each
            if n == rounds // 2:
                wait_for("half the changes acknowledged", lambda: connector.stats.acknowledged_changes >= 5 * n)
                kill_leader(cluster, topic)
        wait_for("every change acknowledged", lambda: connector.stats.acknowledged_changes >= 5 * rounds
                 or not thread.is_alive())
        assert thread.is_alive() and not connector.failures, connector.failures
    finally:
        connector.stop()
        thread.join(60)
    follower = ChangeFollower(cluster.bootstrap, topic)
    try:
        end = follower.end()
        wait_for("the topic read", lambda: follower.poll() >= 0 and follower.position >= end)
    finally:
        follower.close()
    snapshot = [e for e in follower.events if e["op"] == "r"]
    changes = [e for e in follower.events if e["op"] == "u"]
    assert len(snapshot) == 5 and len(follower.events) == 5 + 5 * rounds
    for key in range(1, 6):
        assert [e["after"]["n"] for e in changes if e["after"]["id"] == key] == list(range(1, rounds + 1))
    assert follower.state == {json.dumps({"id": key}): {"id": key, "n": rounds} for key in range(1, 6)}


@one_cluster
def test_event_sourcing_appends_and_a_processor_keep_the_invariants_across_a_leader_kill(cluster):
    """The ledger example's processor (events, answers and input offsets in one transaction) and two clients
    racing for one account's money, bootstrapped from the three brokers; the leader of the partition holding
    the ledger's commands and events is killed -9 midway: every command answered once, the book's history
    without a gap, no balance ever below zero, and the log holds the events of the accepted posts only."""
    from freshet.eventsourcing import CommandClient, CommandProcessor, EventStore
    from freshet.eventsourcing.examples import ledger
    from freshet.eventsourcing.examples.ledger import OpenAccount, Post
    from freshet.testing.topics import read_to_end

    app = ledger.app.named(unique("ledger"), partitions=2)
    topics(cluster, *((name, count) for name, count, configs in app.topic_specs() if not configs))
    app.create_topics(cluster.bootstrap)  # the compacted ones
    cluster.wait_until(LocalCluster.fully_replicated, DEADLINE, "the application's topics")
    stream = "ledger/book"
    processor = CommandProcessor(app, cluster.bootstrap)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    outcomes: list = []
    lock = threading.Lock()
    try:
        with CommandClient(app, cluster.bootstrap) as client:
            opening = [client.send(stream, c) for c in (OpenAccount("cash", True), OpenAccount("shared"),
                                                        OpenAccount("alice"), OpenAccount("bob"))]
            opening.append(client.send(stream, Post({"cash": -600, "shared": 600}, "opening", "2026-01-01")))
            assert all(a.accepted for a in client.answers(opening, DEADLINE).values())

        def spending(seed: int, rounds: int) -> None:
            with CommandClient(app, cluster.bootstrap) as client:
                for r in range(rounds):
                    amount = 10 + (seed * 7 + r * 13) % 50
                    ids = [client.send(stream, Post({"shared": -amount, ("alice", "bob")[seed % 2]: amount},
                                                    f"spend {seed}-{r}-{i}", "2026-01-02")) for i in range(4)]
                    got = client.answers(ids, timeout=DEADLINE)
                    with lock:
                        outcomes.extend(got[i] for i in ids)

        first = [threading.Thread(target=spending, args=(s, 3)) for s in (1, 2)]
        for t in first:
            t.start()
        wait_for("some posts answered", lambda: len(outcomes) >= 8)
        dead = kill_leader(cluster, app.events_topic, app.partition_of(stream))
        for t in first:
            t.join(DEADLINE)
        then = [threading.Thread(target=spending, args=(s, 3)) for s in (3, 4)]  # after the kill: new clients
        for t in then:
            t.start()
        for t in then:
            t.join(DEADLINE)
        assert not any(t.is_alive() for t in first + then), "a client never got all its answers"
    finally:
        processor.stop()
        thread.join(60)
    assert len(outcomes) == 4 * 4 * 3
    ids = [a["id"] for _, v in read_to_end(cluster.bootstrap, app.replies_topic, app.partitions)
           for a in json.loads(v)["answers"]]
    assert len(ids) == len(set(ids)) == 5 + len(outcomes), "a command answered twice, or never"
    with EventStore(app, cluster.bootstrap) as store:
        book = store.history(stream)
        assert [r.version for r in book] == list(range(1, len(book) + 1)), "a gap or a duplicate"
        balances = {r.event.account: 0 for r in book[:4]}  # the four accounts opened first
        for posted in (r.event for r in book[4:]):
            balances = {account: was + posted.entries.get(account, 0) for account, was in balances.items()}
            assert min(balances[a] for a in ("shared", "alice", "bob")) >= 0, f"below zero after {posted.memo}"
        assert len(book) == 5 + sum(1 for o in outcomes if o.accepted)
        assert sum(1 for o in outcomes if not o.accepted) > 0  # the money ran out: later posts refused
        assert store.state(stream).balances == balances
    shown = freshet("es", "state", "ledger", stream, "--name", app.name, "-b", dead_first(cluster, dead))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["balances"] == balances


@one_cluster
def test_ingest_acknowledges_records_through_a_leader_kill_and_every_acknowledged_one_is_in_the_log(cluster,
                                                                                                    tmp_path):
    """``freshet ingest serve -b`` all three brokers; a client posts records one request at a time (REST Proxy v3)
    while the leader of the topic's partition 0 is killed -9: every record answered 200 is at the partition and
    offset its answer names, and posting goes on after the kill."""
    import httpx

    from freshet.testing.ingest import IngestProcess, read_messages

    topic = unique("ingest")
    topics(cluster, (topic, 2))
    acknowledged: dict[tuple[int, int], bytes] = {}
    refused: list = []
    with IngestProcess(cluster.bootstrap, log_path=str(tmp_path / "ingest.log")) as server, \
            httpx.Client(base_url=server.url, timeout=DEADLINE) as http:
        path = f"/v3/clusters/c/topics/{topic}/records"

        def post(i: int) -> None:
            answer = http.post(path, json={"partition_id": i % 2, "value": {"type": "STRING", "data": f"r{i}"}})
            if answer.status_code == 200 and answer.json()["error_code"] == 200:
                report = answer.json()
                acknowledged[(report["partition_id"], report["offset"])] = f"r{i}".encode()
            else:
                refused.append((i, answer.status_code, answer.text))

        health: list[int] = []
        watching = threading.Event()

        def watch() -> None:  # what a load balancer's health check sees, all along
            with httpx.Client(base_url=server.url, timeout=DEADLINE) as checker:
                while not watching.wait(0.01):
                    health.append(checker.get("/healthz").status_code)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for i in range(60):
            post(i)
        kill_leader(cluster, topic, 0)
        for i in range(60, 140):
            post(i)
        watching.set()
        watcher.join(DEADLINE)
    assert server.process.returncode == 0
    assert refused == [] and len(acknowledged) == 140  # answered once the new leader had them
    stored = {(p, o): v for p, o, _k, v, _h in read_messages(cluster.bootstrap, topic, 2)}
    assert {k: stored.get(k) for k in acknowledged} == acknowledged
    assert len(set(stored.values())) == len(stored)  # none written twice
    # two brokers of three serve: the log never was unreachable
    assert health and set(health) == {200}, f"{health.count(503)} of {len(health)} health checks said 503"


@one_cluster
def test_the_dashboards_cluster_view_with_a_dead_broker_named_first(cluster):
    """The dashboard's collector bootstrapped with a killed leader first: /api/cluster shows the broker fenced,
    the partition led by another ISR member, under-replicated without the dead broker in its ISR."""
    from fastapi.testclient import TestClient

    from freshet.dashboard.app import create_app
    from freshet.dashboard.collector import Collector

    topic = unique("dash")
    topics(cluster, (topic, 1))
    dead = kill_leader(cluster, topic)
    collector = Collector(dead_first(cluster, dead))
    try:
        def view():
            collector.collect()
            answer = TestClient(create_app(collector)).get("/api/cluster").json()
            [shown] = [t for t in answer["topics"] if t["name"] == topic] or [None]
            return shown and shown["partitions"][0]["leader"] != dead and answer

        answer = wait_for("the new leader on the cluster view", view)
    finally:
        collector.stop()
    [shown] = [t for t in answer["topics"] if t["name"] == topic]
    partition = shown["partitions"][0]
    assert partition["leader"] == cluster.leader(topic) and dead not in partition["isr"] and len(
        partition["isr"]) == 2 and dead in partition["replicas"]
    assert [b["fenced"] for b in answer["brokers"] if b["id"] == dead] == [True]
    assert (topic, 0) in {(p["topic"], p["partition"]) for p in answer["under_replicated"]}

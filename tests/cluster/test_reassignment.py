"""Partition reassignment (KIP-455) on a three-broker cluster: a partition moved, and its replication factor
changed, under an idempotent acks=all producer and a consumer group (nothing lost or duplicated, the plan's
replicas in the end, the removed broker's log gone); a throttled move listed with its progress, surviving the
active controller's kill -9, then cancelled (back to the original replicas); bad plans answered with Kafka's
codes and nothing changed; ``freshet topic reassign``; the one-node broker's and an unauthorized client's answers."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from freshet.client.reassignment import ReassignmentAdmin, ReassignmentRefused
from freshet.local import BrokerProcess
from freshet.format.record_batch import encode_batch
from freshet.testing.raw_kafka import RawConnection, produce

from .conftest import DEADLINE, admin
from .test_metadata import created


def freshet(*args, bootstrap: str):
    return subprocess.run([sys.executable, "-m", "freshet.cli.main", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=DEADLINE)


class Load:
    """An idempotent acks=all producer writing 0, 1, 2, ... (each acknowledged value noted) and a consumer group
    reading the topic, both running until ``stop()``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, Producer

        self.topic = topic
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.consumed: list[int] = []
        self._stop = threading.Event()
        self._produced = threading.Event()  # the producer has stopped and flushed
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "message.timeout.ms": 120_000})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                   "auto.commit.interval.ms": 500})
        self._consumer.subscribe([topic])
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(int(msg.value()))

    def _produce(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(self.topic, str(i).encode(), on_delivery=self._delivered)
            self._producer.poll(0.002)
            i += 1
        self._producer.flush(120)

    def _consume(self) -> None:
        import time

        end = None
        while not self._produced.is_set() or len(self.consumed) < len(self.acked):
            if self._produced.is_set():
                end = end or time.monotonic() + DEADLINE
                if time.monotonic() > end:
                    break  # the assertions say what is missing
            msg = self._consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumed.append(int(msg.value()))
        self._consumer.close()

    def wait_for_acks(self, count: int) -> None:
        import time

        end = time.monotonic() + DEADLINE
        while len(self.acked) < count:
            assert time.monotonic() < end, f"only {len(self.acked)} records acknowledged"
            time.sleep(0.05)

    def stop(self) -> None:
        """The producer stops and flushes; then the group reads up to the last acknowledged record."""
        self._stop.set()
        self._threads[0].join(DEADLINE * 2)
        self._produced.set()
        self._threads[1].join(DEADLINE * 2)


def topic_dir(cluster, node: int, topic: str) -> str:
    return os.path.join(cluster.data_dir(node), "topics", topic)


def moved(cluster, topic: str, target: list[int]):
    """The partition's replicas are the target, all in the ISR, nothing being added or removed."""
    def done(metadata):
        p = cluster.partition(topic, 0, metadata)
        return p if (p and p["replicas"] == target and sorted(p["isr"]) == sorted(target)
                     and not p["adding_replicas"] and not p["removing_replicas"]) else None
    return cluster.wait_until(done, DEADLINE, f"{topic}-0 on {target}")


def _filled_partition_sharing_a_broker(cluster, topic: str, position: int):
    """Creates ``topic`` (3 partitions x 2 replicas on 3 brokers), writes 100 records to a partition whose replica
    at ``position`` holds another partition of the topic too; (its index, its metadata, the broker it is not on)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    created(admin(cluster.bootstrap), NewTopic(topic, 3, 2))
    meta = cluster.wait_until(lambda m: cluster.partition(topic, 2, m) and m, DEADLINE)
    parts = [cluster.partition(topic, i, meta) for i in range(3)]
    index, part = next((i, p) for i, p in enumerate(parts)
                       if any(p["replicas"][position] in q["replicas"] for j, q in enumerate(parts) if j != i))
    spare = next(b for b in (1, 2, 3) if b not in part["replicas"])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce(topic, b"%d" % i, partition=index)
    assert producer.flush(DEADLINE) == 0
    return index, part, spare


def _log_bytes(directory: str) -> int:
    """The bytes of a partition's segment files in ``directory``."""
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".log"))


@pytest.mark.parametrize("factor, target_of", [
    (2, lambda replicas: [replicas[1], next(b for b in (1, 2, 3) if b not in replicas)]),  # [a, b] -> [b, c]
    (1, lambda replicas: [replicas[0], *(b for b in (1, 2, 3) if b not in replicas)]),  # factor 1 -> 3
], ids=["move", "factor-1-to-3"])
def test_a_move_under_an_idempotent_producer_and_a_consumer_group_loses_and_duplicates_nothing(
        cluster, factor, target_of):
    from confluent_kafka.admin import NewTopic

    topic = f"moving-{factor}"
    created(admin(cluster.bootstrap), NewTopic(topic, 1, factor, config={"min.insync.replicas": "1"}))
    replicas = cluster.wait_until(lambda m: (p := cluster.partition(topic, 0, m)) and p["replicas"], DEADLINE)
    target = target_of(replicas)
    removed = [b for b in replicas if b not in target]
    load = Load(cluster.bootstrap, topic)
    try:
        load.wait_for_acks(2000)
        assert ReassignmentAdmin(cluster.bootstrap).alter({(topic, 0): target}) == {(topic, 0): None}
        moved(cluster, topic, target)
        done_at = len(load.acked)
        load.wait_for_acks(done_at + 2000)  # and the producer goes on on the new replicas
    finally:
        load.stop()
    assert load.failed == []
    acked = sorted(load.acked)
    assert acked == list(range(len(acked)))  # every produced record acknowledged once, in order of sending
    assert load.consumed == list(range(len(load.consumed)))  # the group read each record once, in order
    assert set(acked) <= set(load.consumed)
    for node in removed:  # the removed broker stopped its replica and deleted its log
        cluster.wait_until(lambda m: not os.path.exists(topic_dir(cluster, node, topic)), DEADLINE,
                           f"broker {node}'s log of {topic} deleted")
    for node in target:  # every replica of the plan has the whole log
        assert os.path.isdir(topic_dir(cluster, node, topic))
    leader = cluster.partition(topic, 0)["leader"]
    for node in removed:  # a client still asking a removed broker is sent to the leader, as by Kafka
        with RawConnection(cluster.bootstrap_of(node)) as conn:
            answer = produce(conn, topic, 0, encode_batch([(None, b"late", 0)]), version=10)
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert answer.current_leader.leader_id == leader


def test_a_replica_moved_off_a_broker_that_keeps_other_partitions_of_the_topic_empties_its_log(cluster):
    # a partition whose first replica holds another partition of the topic too (3 partitions x 2 on 3 brokers)
    index, part, spare = _filled_partition_sharing_a_broker(cluster, "split", 0)
    removed, kept = part["replicas"]
    directory = os.path.join(topic_dir(cluster, removed, "split"), str(index))

    def log_bytes() -> int:
        return _log_bytes(directory)

    cluster.wait_until(lambda m: log_bytes() > 0, DEADLINE, "the records on every replica")
    ReassignmentAdmin(cluster.bootstrap).alter({("split", index): [kept, spare]})
    cluster.wait_until(lambda m: (p := cluster.partition("split", index, m)) and p["replicas"] == [kept, spare]
                       and sorted(p["isr"]) == sorted([kept, spare]), DEADLINE, "the move done")
    cluster.wait_until(lambda m: os.path.isdir(directory) and log_bytes() == 0, DEADLINE,
                       f"broker {removed}'s copy of split-{index} emptied")
    assert os.path.isdir(topic_dir(cluster, removed, "split"))  # its other partition stays


def test_a_throttled_move_is_listed_survives_a_controller_failover_and_goes_back_when_cancelled(own_cluster,
                                                                                                   tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    c = own_cluster
    created(admin(c.bootstrap), NewTopic("slow", 1, 2))
    original = c.wait_until(lambda m: (p := c.partition("slow", 0, m)) and p["replicas"], DEADLINE)
    spare = next(b for b in (1, 2, 3) if b not in original)
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(3000):  # ~3 MB: more than one fetch (1 MB a partition) can bring
        producer.produce("slow", b"%06d" % i + b"x" * 1000)
        producer.poll(0)
    assert producer.flush(DEADLINE) == 0
    plan = tmp_path / "plan.json"
    target = [original[0], spare]
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "slow", "partition": 0,
                                                               "replicas": target}]}))
    # 1000 bytes/s: the new replica gets one fetch's worth, then waits out the throttle
    started = freshet("topic", "reassign", "--plan", str(plan), "--throttle", "1000", bootstrap=c.bootstrap)
    assert started.returncode == 0, started.stderr
    assert "reassigning 1 partition: slow-0 -> " in started.stdout
    meta = c.metadata()
    assert meta["broker_configs"][str(spare)]["follower.replication.throttled.rate"] == "1000"
    configs = next(t["configs"] for t in meta["topics"] if t["name"] == "slow")
    assert configs["follower.replication.throttled.replicas"] == f"0:{spare}"
    assert configs["leader.replication.throttled.replicas"] == ",".join(f"0:{b}" for b in sorted(original))
    moving = ReassignmentAdmin(c.bootstrap).ongoing()
    assert [(m.topic, m.partition, m.target, m.adding, m.removing) for m in moving] == [
        ("slow", 0, target, [spare], [original[1]])]
    from kafka import KafkaAdminClient, TopicPartition  # Kafka's own admin client, asking the controller's node

    kafka_admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000)
    try:
        assert kafka_admin.list_partition_reassignments() == {TopicPartition("slow", 0): {
            "replicas": [*target, original[1]], "adding_replicas": [spare], "removing_replicas": [original[1]]}}
    finally:
        kafka_admin.close()
    # the new replica has come part of the way and is held there
    status = c.wait_until(lambda m: (
        (out := freshet("topic", "reassign", "--status", bootstrap=c.bootstrap).stdout)
        and f"broker {spare}: " in out and " 0 B of" not in out and out), DEADLINE, "progress shown")
    assert "slow-0: in progress, replicas" in status and "records behind" in status
    assert c.partition("slow", 0)["adding_replicas"] == [spare]

    # the move is cluster metadata: the active controller killed -9, the survivors still hold it
    active = c.metadata()["controller_id"]
    c.kill_controller(active)
    c.wait_until(lambda m: m["controller_id"] not in (-1, active), DEADLINE, "a new active controller")
    assert [(m.topic, m.adding) for m in ReassignmentAdmin(c.bootstrap).ongoing()] == [("slow", [spare])]

    cancelled = freshet("topic", "reassign", "--cancel", "--plan", str(plan), bootstrap=c.bootstrap)
    assert cancelled.returncode == 0, cancelled.stderr
    p = c.wait_until(lambda m: (p := c.partition("slow", 0, m)) and sorted(p["replicas"]) == sorted(original)
                     and not p["adding_replicas"] and p, DEADLINE, "back to the original replicas")
    assert spare not in p["isr"] and ReassignmentAdmin(c.bootstrap).ongoing() == []
    c.wait_until(lambda m: not os.path.exists(topic_dir(c, spare, "slow")), DEADLINE,
                 f"broker {spare}'s partial copy deleted")
    # --status with the plan: nothing moving any more, the throttle removed
    done = freshet("topic", "reassign", "--status", "--plan", str(plan), bootstrap=c.bootstrap)
    assert done.returncode == 0, done.stderr
    assert "throttle removed" in done.stdout
    meta = c.metadata()
    assert not any(k.endswith("replication.throttled.rate") for v in meta["broker_configs"].values() for k in v)
    assert not any("throttled" in k for t in meta["topics"] if t["name"] == "slow" for k in t["configs"])


def test_bad_plans_are_answered_with_kafkas_codes_and_change_nothing(cluster, tmp_path):
    from confluent_kafka.admin import NewTopic

    created(admin(cluster.bootstrap), NewTopic("steady", 2, 2))
    cluster.wait_until(lambda m: cluster.partition("steady", 1, m), DEADLINE)
    before = [t for t in cluster.metadata()["topics"] if t["name"] == "steady"]
    replicas = before[0]["partitions"][0]["replicas"]
    cases = [
        ("nope", 0, [1, 2], ErrorCode.unknown_topic_or_partition),
        ("steady", 7, [1, 2], ErrorCode.unknown_topic_or_partition),
        ("steady", 0, [1, 9], ErrorCode.invalid_replica_assignment),  # no broker 9
        ("steady", 0, [2, 2], ErrorCode.invalid_replica_assignment),  # a broker twice
        ("steady", 0, [], ErrorCode.invalid_replica_assignment),  # empty
        ("steady", 0, None, ErrorCode.no_reassignment_in_progress),  # cancel, nothing in progress
    ]
    with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
        for topic, index, target, code in cases:
            answer = conn.request(45, 0, {"timeout": 10_000, "topics": [{"name": topic, "partitions": [
                {"partition_index": index, "replicas": target}]}]})
            assert answer.error_code == ErrorCode.none
            result = answer.responses[0].partitions[0]
            assert (result.partition_index, result.error_code) == (index, code), (topic, index, target)
            assert result.error_message
        # v1 (KIP-860): a change of the replication factor refused when the client does not allow it
        answer = conn.request(45, 1, {"timeout": 10_000, "allow_replication_factor_change": False,
                                      "topics": [{"name": "steady", "partitions": [
                                          {"partition_index": 0, "replicas": [1, 2, 3]}]}]})
        assert answer.responses[0].partitions[0].error_code == ErrorCode.invalid_replication_factor
        listed = conn.request(46, 0, {"timeout": 10_000, "topics": None})
        assert (listed.error_code, listed.topics) == (ErrorCode.none, ())
    after = [t for t in cluster.metadata()["topics"] if t["name"] == "steady"]
    assert after == before
    # the CLI: one line, exit 1, for a refused plan and for a file that is not a plan
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "steady", "partition": 0,
                                                               "replicas": [replicas[0], 9]}]}))
    refused = freshet("topic", "reassign", "--plan", str(plan), bootstrap=cluster.bootstrap)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "steady-0: INVALID_REPLICA_ASSIGNMENT" in refused.stderr
    refused = freshet("topic", "reassign", "--plan", str(plan), "--throttle", "5000", bootstrap=cluster.bootstrap)
    assert refused.returncode == 1 and "steady-0: INVALID_REPLICA_ASSIGNMENT" in refused.stderr
    meta = cluster.metadata()  # nothing moves: the throttle set for the plan is taken back
    assert not any("throttled" in k for v in meta["broker_configs"].values() for k in v)
    assert not any("throttled" in k for t in meta["topics"] if t["name"] == "steady" for k in t["configs"])
    plan.write_text(json.dumps({"partitions": [{"topic": "steady", "replicas": [1]}]}))
    bad = freshet("topic", "reassign", "--plan", str(plan), bootstrap=cluster.bootstrap)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "partitions[0] needs" in bad.stderr
    nothing = freshet("topic", "reassign", "--cancel", bootstrap=cluster.bootstrap)
    assert nothing.returncode == 1 and nothing.stderr == "error: no reassignment in progress\n"
    with pytest.raises(ReassignmentRefused, match="NO_REASSIGNMENT_IN_PROGRESS"):
        ReassignmentAdmin(cluster.bootstrap).alter({("steady", 1): None})
    assert [t for t in cluster.metadata()["topics"] if t["name"] == "steady"] == before


def test_a_one_node_broker_has_every_replica_in_place_and_asks_for_cluster_permissions(broker, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected one aborts its futures
    client.create_topics([NewTopic("solo", 1)])["solo"].result(30)
    with RawConnection(broker.bootstrap) as conn:
        node = conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False}).brokers[0].node_id
        answer = conn.request(45, 1, {"timeout": 10_000, "allow_replication_factor_change": True, "topics": [
            {"name": "solo", "partitions": [{"partition_index": 0, "replicas": [node]},
                                            {"partition_index": 1, "replicas": [node]}]},
            {"name": "solo-missing", "partitions": [{"partition_index": 0, "replicas": [node]}]}]})
        codes = [(t.name, p.partition_index, p.error_code) for t in answer.responses for p in t.partitions]
        assert codes == [("solo", 0, ErrorCode.none), ("solo", 1, ErrorCode.unknown_topic_or_partition),
                         ("solo-missing", 0, ErrorCode.unknown_topic_or_partition)]
        answer = conn.request(45, 0, {"timeout": 10_000, "topics": [{"name": "solo", "partitions": [
            {"partition_index": 0, "replicas": [node, node + 1]}]}]})
        assert answer.responses[0].partitions[0].error_code == ErrorCode.invalid_replica_assignment
        assert conn.request(46, 0, {"timeout": 10_000, "topics": None}).topics == ()
        versions = {k.api_key: (k.min_version, k.max_version) for k in conn.request(18, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
        assert versions[45] == (0, 1) and versions[46] == (0, 0)
    # with an authorizer, ANONYMOUS may neither alter nor list reassignments (ALTER / DESCRIBE on the cluster)
    with BrokerProcess(data_dir=str(tmp_path / "shut"), extra_args=["--authorizer"]) as b, \
            RawConnection(b.bootstrap) as conn:
        answer = conn.request(45, 0, {"timeout": 10_000, "topics": [{"name": "x", "partitions": [
            {"partition_index": 0, "replicas": [1]}]}]})
        assert answer.error_code == ErrorCode.cluster_authorization_failed
        assert answer.responses[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
        listed = conn.request(46, 0, {"timeout": 10_000, "topics": None})
        assert (listed.error_code, listed.topics) == (ErrorCode.cluster_authorization_failed, ())


def test_a_replica_moved_away_while_its_broker_was_down_is_deleted_when_it_comes_back(own_cluster):
    c = own_cluster
    index, part, spare = _filled_partition_sharing_a_broker(c, "away", 1)
    leader, down = part["replicas"]  # the follower goes down; it holds another partition of the topic too
    directory = os.path.join(topic_dir(c, down, "away"), str(index))

    def log_bytes() -> int:
        return _log_bytes(directory)

    c.wait_until(lambda m: log_bytes() > 0, DEADLINE, f"the records on broker {down}")
    c.kill(down)
    ReassignmentAdmin(c.bootstrap).alter({("away", index): [leader, spare]})
    c.wait_until(lambda m: (p := c.partition("away", index, m)) and p["replicas"] == [leader, spare]
                 and sorted(p["isr"]) == sorted([leader, spare]), DEADLINE, "the move done without broker "
                 f"{down}")
    assert log_bytes() > 0  # its copy is still on its disk
    c.restart(down)
    c.wait_until(lambda m: log_bytes() == 0, DEADLINE, f"broker {down}'s stale copy of away-{index} deleted")
    c.wait_until(c.fully_replicated, DEADLINE, "its other partitions back in their ISR")


def test_a_move_keeping_a_replica_that_is_down_completes_without_it(own_cluster):
    # as Kafka's: the move is done once its new replicas are in the ISR; a replica it keeps that is down catches up
    # when it comes back (it waited for that broker before)
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    c = own_cluster
    created(admin(c.bootstrap), NewTopic("keeps", 1, 2, config={"min.insync.replicas": "1"}))
    leader, down = c.wait_until(lambda m: (p := c.partition("keeps", 0, m)) and p["replicas"], DEADLINE)
    spare = next(b for b in (1, 2, 3) if b not in (leader, down))
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce("keeps", b"%d" % i)
    assert producer.flush(DEADLINE) == 0
    c.kill(down)
    c.wait_until(lambda m: c.partition("keeps", 0, m)["isr"] == [leader], DEADLINE, f"broker {down} out of the ISR")
    ReassignmentAdmin(c.bootstrap).alter({("keeps", 0): [down, spare]})  # the leader leaves, the down one stays
    p = c.wait_until(lambda m: (p := c.partition("keeps", 0, m)) and p["replicas"] == [down, spare]
                     and not p["adding_replicas"] and not p["removing_replicas"] and p, DEADLINE,
                     f"the move done while broker {down} is down")
    assert p["isr"] == [spare] and p["leader"] == spare
    for i in range(100, 200):  # the new leader takes writes, and has every acknowledged one
        producer.produce("keeps", b"%d" % i)
    assert producer.flush(DEADLINE) == 0
    c.restart(down)
    c.wait_until(lambda m: sorted(c.partition("keeps", 0, m)["isr"]) == sorted([down, spare]), DEADLINE,
                 f"broker {down} back in the ISR")
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "keeps-check", "auto.offset.reset": "earliest"})
    consumer.subscribe(["keeps"])
    values = []
    end = time.monotonic() + DEADLINE
    while len(values) < 200 and time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(200))

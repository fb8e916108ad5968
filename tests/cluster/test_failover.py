"""Brokers that die, pause, or clash: kill -9 of a leader moves its partitions to another ISR member at once
(its session connection to the controller closes); a paused broker is fenced after the session timeout and
unfenced when it resumes; a second broker with a live broker's node id is refused and exits with one line."""

import os
import subprocess
import sys

import pytest

from freshet.local import free_port
from freshet.local.cluster import LocalCluster
from freshet.testing.raw_kafka import RawConnection

from .conftest import DEADLINE, admin
from .test_metadata import created, wait_for


def client_leader(client, topic: str, index: int = 0):
    md = client.list_topics(topic, timeout=30)
    part = md.topics[topic].partitions.get(index)
    return (part.leader, sorted(part.isrs), sorted(md.brokers)) if part else None


def answers(cluster, node_id: int) -> dict[str, dict[str, dict]]:
    """What broker ``node_id`` itself answers of the topics "failover" and "lone", by request (Metadata v12,
    DescribeTopicPartitions v0 = API 75), topic and partition index: error name, leader, leader epoch, replicas,
    ISR, offline replicas."""
    def partitions(topics) -> dict[str, dict]:
        return {t.name: {p.partition_index: {
            "error": p.error_code.name, "leader": p.leader_id, "epoch": p.leader_epoch,
            "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes), "offline": list(p.offline_replicas)}
            for p in t.partitions} for t in topics}

    with RawConnection(cluster.bootstrap_of(node_id), timeout=30) as conn:
        metadata = conn.request(3, 12, {"topics": [{"name": n, "topic_id": None} for n in ("failover", "lone")],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
        described = conn.request(75, 0, {"topics": [{"name": "failover"}, {"name": "lone"}],
                                         "response_partition_limit": 2000, "cursor": None})
    return {"metadata": partitions(metadata.topics), "describe": partitions(described.topics)}


def test_a_leader_killed_9_is_replaced_by_an_isr_member_and_comes_back_as_a_follower(own_cluster):
    """... and what a client is told by a surviving broker itself, in Metadata and DescribeTopicPartitions (API
    75) alike: the new leader with a leader epoch that moved on, the killed broker among the offline replicas; a
    partition whose only replica was on the killed broker LEADER_NOT_AVAILABLE, leader -1, offline replicas [it],
    until it is back."""
    from confluent_kafka.admin import NewTopic

    client = admin(own_cluster.bootstrap)
    created(client, NewTopic("failover", 1, 3, config={"min.insync.replicas": "2"}),
            NewTopic("lone", 3, replica_assignment=[[1], [2], [3]]))  # partition i on broker i + 1 alone
    last_epoch = -1
    for _ in range(3):  # the same partition, its leader killed over and over
        # every replica in the ISR (a restarted one is taken back by the leader once it has caught up)
        old_leader, isr, _ = wait_for("a leader and all three replicas in the ISR", lambda: (
            (found := client_leader(client, "failover")) and len(found[1]) == 3 and found))
        assert old_leader in isr
        own_cluster.kill(old_leader)
        survivors = [n for n in (1, 2, 3) if n != old_leader]
        # what a client is told, through a surviving broker: a new leader from the ISR, the dead one out of it
        seen = wait_for("a new leader in the metadata", lambda: (
            (found := client_leader(admin_of[0], "failover")) and found[0] in survivors and found))
        new_leader, new_isr, brokers = seen
        assert new_leader in isr and old_leader not in new_isr and old_leader not in brokers
        part = own_cluster.partition("failover", 0)
        assert part["leader_epoch"] >= 1 and part["leader"] == new_leader
        seen = wait_for("the survivor's answers caught up with the controller", lambda: (
            (a := answers(own_cluster, survivors[0]))["describe"]["failover"][0]["epoch"] == part["leader_epoch"]
            and a["metadata"]["failover"][0]["epoch"] == part["leader_epoch"] and a))
        for request in ("metadata", "describe"):
            failover, lone = seen[request]["failover"][0], seen[request]["lone"]
            assert failover["error"] == "none" and failover["leader"] == new_leader, (request, failover)
            assert failover["epoch"] > last_epoch and failover["offline"] == [old_leader], (request, failover)
            assert sorted(failover["replicas"]) == [1, 2, 3] and old_leader not in failover["isr"]
            offline = lone[old_leader - 1]
            assert offline["error"] == "leader_not_available" and offline["leader"] == -1, (request, offline)
            assert offline["replicas"] == [old_leader] and offline["offline"] == [old_leader], (request, offline)
            for n in survivors:
                assert lone[n - 1]["error"] == "none" and lone[n - 1]["leader"] == n and not lone[n - 1]["offline"]
        wait_for("a client's metadata naming the lone partition LEADER_NOT_AVAILABLE", lambda: (
            (p := admin_of[0].list_topics("lone", timeout=30).topics["lone"].partitions[old_leader - 1]).leader == -1
            and p.error is not None and p.error.name() == "LEADER_NOT_AVAILABLE"))
        last_epoch = part["leader_epoch"]
        own_cluster.restart(old_leader)
        wait_for("the restarted broker listed again", lambda: old_leader in client_leader(client, "failover")[2])
        back = wait_for("the lone partition led again by the restarted broker", lambda: (
            (a := answers(own_cluster, survivors[0]))["describe"]["lone"][old_leader - 1]["leader"] == old_leader
            and a["metadata"]["lone"][old_leader - 1]["leader"] == old_leader and a))
        for request in ("metadata", "describe"):
            assert back[request]["lone"][old_leader - 1]["error"] == "none"
            assert back[request]["lone"][old_leader - 1]["offline"] == []
            assert back[request]["failover"][0]["offline"] == []


admin_of = [None]


@pytest.fixture(autouse=True)
def _survivor_client(request):
    """An admin client over every broker's address (it finds the survivors)."""
    if "own_cluster" in request.fixturenames:
        admin_of[0] = admin(request.getfixturevalue("own_cluster").bootstrap)
    yield
    admin_of[0] = None


def test_a_paused_broker_is_fenced_after_the_session_timeout_and_unfenced_when_it_resumes(tmp_path):
    from confluent_kafka.admin import NewTopic

    with LocalCluster(3, directory=str(tmp_path / "c"), session_timeout_ms=3000) as cluster:
        client = admin(cluster.bootstrap)
        created(client, NewTopic("paused", 1, 3))
        leader = cluster.leader("paused")
        cluster.pause(leader)
        try:
            cluster.wait_until(lambda m: (p := cluster.partition("paused", 0, m))["leader"] not in (-1, leader)
                               and leader not in p["isr"], DEADLINE, "the paused leader fenced")
            assert [b["fenced"] for b in cluster.metadata()["brokers"] if b["broker_id"] == leader] == [True]
        finally:
            cluster.resume(leader)
        cluster.wait_until(lambda m: not [b for b in m["brokers"] if b["broker_id"] == leader][0]["fenced"],
                           DEADLINE, "the resumed broker unfenced")


def test_a_second_broker_with_a_live_brokers_node_id_is_refused_with_one_line(cluster, tmp_path):
    before = cluster.metadata()["brokers"]
    controllers = ",".join(f"{h}:{p}" for h, p in cluster.controller_addresses)
    proc = subprocess.run(
        [sys.executable, "-m", "freshet.cli.main", "broker", "start", "--node-id", "2", "--controller", controllers,
         "--data-dir", str(tmp_path / "impostor"), "--port", str(free_port()),
         "--controller-password-file", cluster.password_file],
        capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: node id 2 is already registered by another live broker (DUPLICATE_BROKER_REGISTRATION): give each "
        "broker its own --node-id")
    assert "Traceback" not in proc.stderr
    after = cluster.metadata()["brokers"]
    assert [(b["broker_id"], b["incarnation_id"], b["port"], b["fenced"]) for b in after] == [
        (b["broker_id"], b["incarnation_id"], b["port"], b["fenced"]) for b in before]


@pytest.mark.parametrize("value, message", [
    ("nohost", "error: --controller: controller 'nohost' is not HOST:PORT"),
    ("127.0.0.1:99999", "error: --controller: controller '127.0.0.1:99999' is not HOST:PORT"),
])
def test_a_bad_controller_list_is_one_line(tmp_path, value, message):
    proc = subprocess.run(
        [sys.executable, "-m", "freshet.cli.main", "broker", "start", "--controller", value,
         "--data-dir", str(tmp_path / "d"), "--port", str(free_port())],
        capture_output=True, text=True, timeout=DEADLINE)
    assert (proc.returncode, proc.stderr.strip()) == (1, message)
    assert not os.path.exists(tmp_path / "d")


def test_the_active_controller_killed_9_topics_are_created_again_and_no_broker_is_fenced(own_cluster):
    from confluent_kafka.admin import NewTopic

    client = admin(own_cluster.bootstrap)
    created(client, NewTopic("before", 3, 3))
    before = own_cluster.metadata()
    epochs = {p["partition"]: p["leader_epoch"] for t in before["topics"] for p in t["partitions"]}
    first = before["controller_id"]
    own_cluster.kill_controller(first)
    second = own_cluster.wait_until(lambda m: m["controller_id"] not in (-1, first) and m["controller_id"],
                                    DEADLINE, "a new active controller")

    def create_again():
        future = client.create_topics([NewTopic("after", 2, 3)], operation_timeout=30)["after"]
        try:
            future.result(60)
            return True
        except Exception as exc:  # NOT_CONTROLLER / timed out while the controllers elect: try again
            return "TOPIC_ALREADY_EXISTS" in str(exc)

    wait_for("a topic created after the controller failover", create_again)
    wait_for("the new topic in a client's metadata", lambda: "after" in client.list_topics(timeout=30).topics)
    after = own_cluster.metadata()
    assert after["controller_id"] == second
    # the brokers moved their sessions to the surviving controllers: none was fenced, no leadership moved
    assert [b["fenced"] for b in after["brokers"]] == [False, False, False]
    [still] = [t for t in after["topics"] if t["name"] == "before"]
    assert {p["partition"]: p["leader_epoch"] for p in still["partitions"]} == epochs


def test_a_preferred_leader_election_gives_the_leadership_back_to_the_first_replica(own_cluster):
    """The partition whose first replica is on the active controller's node: that broker killed, the clients
    are told of a live broker as the controller (librdkafka sends ElectLeaders there, and waited for the dead
    one until it timed out, "Failed while waiting for controller"), and the election is answered throughout."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import NewTopic, _ElectionType

    client = admin(own_cluster.bootstrap)
    created(client, NewTopic("elect", 3, 3))  # leaders spread: one partition's first replica on every node
    controller = own_cluster.metadata()["controller_id"]
    [index] = [i for i in range(3) if own_cluster.partition("elect", i)["replicas"][0] == controller]
    tp = TopicPartition("elect", index)
    preferred = controller

    def elect(partition):
        try:
            return client.elect_leaders(_ElectionType.PREFERRED, [partition]).result(60)[partition]
        except KafkaException as exc:
            return exc.args[0]

    assert elect(tp).name() == "ELECTION_NOT_NEEDED"
    assert elect(TopicPartition("nope", 0)).name() == "UNKNOWN_TOPIC_OR_PART"
    own_cluster.kill(preferred)
    own_cluster.wait_until(lambda m: own_cluster.partition("elect", index, m)["leader"] not in (-1, preferred),
                           DEADLINE, "another leader")
    # the client learns the broker is gone (and forgets it), then asks the controller for an election
    md = wait_for("the killed broker gone from the client's metadata", lambda: (
        (m := client.list_topics(timeout=30)) and preferred not in m.brokers and m))
    assert md.controller_id in md.brokers
    assert elect(tp).name() == "PREFERRED_LEADER_NOT_AVAILABLE"
    own_cluster.restart(preferred)
    own_cluster.wait_until(lambda m: len(own_cluster.partition("elect", index, m)["isr"]) == 3, DEADLINE,
                           "the restarted replica back in the ISR")
    epoch = own_cluster.partition("elect", index)["leader_epoch"]
    assert elect(tp) is None
    part = own_cluster.partition("elect", index)
    assert part["leader"] == preferred and part["leader_epoch"] == epoch + 1
    assert wait_for("the client told", lambda: client_leader(client, "elect", index)[0] == preferred)


def test_one_coordinator_for_every_client_and_the_groups_commits_survive_it(own_cluster):
    """FindCoordinator names the leader of the replicated __consumer_offsets on every broker; two members
    bootstrapped from two brokers are one group; the coordinator killed -9, the next leader of
    __consumer_offsets coordinates, with the commits made before; the old one back does not take it back."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import NewTopic

    created(admin(own_cluster.bootstrap), NewTopic("shared", 2, 3))

    def coordinators(nodes) -> set[int]:
        found = set()
        for node_id in nodes:
            client = admin(own_cluster.bootstrap_of(node_id))
            found.add(wait_for("a coordinator", lambda: _coordinator_of(client, "g")))
        return found

    first = coordinators((1, 2, 3))
    assert len(first) == 1
    [first] = first
    offsets = own_cluster.partition("__consumer_offsets", 0)
    assert offsets["leader"] == first and len(offsets["replicas"]) == 3
    consumers = [Consumer({"bootstrap.servers": own_cluster.bootstrap_of(n), "group.id": "g",
                           "session.timeout.ms": 10000, "enable.auto.commit": False}) for n in (1, 2)]
    try:
        for c in consumers:
            c.subscribe(["shared"])

        def split():
            for c in consumers:
                c.poll(0.2)
            owned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            return sorted(owned) == [[0], [1]] and owned

        wait_for("the two members sharing the two partitions", split)
    finally:
        for c in consumers:
            c.close()
    committer = Consumer({"bootstrap.servers": own_cluster.bootstrap_of(first % 3 + 1), "group.id": "kept"})
    committer.commit(offsets=[TopicPartition("shared", 0, 40), TopicPartition("shared", 1, 41)], asynchronous=False)
    committer.close()
    wait_for("the commits replicated to the whole ISR", lambda: len(own_cluster.partition(
        "__consumer_offsets", 0)["isr"]) == 3 and _followers_caught_up(own_cluster, first))
    own_cluster.kill(first)
    survivors = [n for n in (1, 2, 3) if n != first]
    second = own_cluster.wait_until(lambda m: (p := own_cluster.partition("__consumer_offsets", 0, m))["leader"]
                                    not in (-1, first) and p["leader"], DEADLINE, "another coordinator")
    wait_for("every survivor naming the new coordinator", lambda: coordinators(survivors) == {second})
    reader = Consumer({"bootstrap.servers": own_cluster.bootstrap_of(second), "group.id": "kept"})
    try:
        committed = wait_for("the commits on the new coordinator", lambda: (found := reader.committed(
            [TopicPartition("shared", 0), TopicPartition("shared", 1)], timeout=30)) and all(
            tp.offset >= 0 for tp in found) and found)
        assert [tp.offset for tp in committed] == [40, 41]
    finally:
        reader.close()
    own_cluster.restart(first)  # back, it does not take the role back from the groups that moved
    wait_for("every broker naming the new coordinator", lambda: coordinators((1, 2, 3)) == {second})


def _coordinator_of(client, group: str) -> int | None:
    try:
        return client.describe_consumer_groups([group], request_timeout=10)[group].result(30).coordinator.id
    except Exception:  # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is being created
        return None


def _followers_caught_up(cluster, leader: int) -> bool:
    """Every replica's log of __consumer_offsets-0 as long as the leader's (their data directories, read)."""
    import os

    sizes = set()
    for node_id in (1, 2, 3):
        directory = os.path.join(cluster.data_dir(node_id), "topics", "__consumer_offsets", "0")
        sizes.add(sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
                      if f.endswith(".log")))
    return len(sizes) == 1


def test_metrics_show_leaders_under_replicated_and_offline_partitions_and_the_active_controller(tmp_path):
    import urllib.request

    from confluent_kafka.admin import NewTopic

    def scrape(cluster, node_id) -> dict[str, float]:
        with urllib.request.urlopen(cluster.metrics_url(node_id), timeout=30) as answer:
            text = answer.read().decode()
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith(("kafka_server_replicamanager", "kafka_controller_kafkacontroller"))}

    with LocalCluster(3, directory=str(tmp_path / "c"), broker_args=["--metrics-port", "0"]) as cluster:
        created(admin(cluster.bootstrap), NewTopic("measured", 3, 3), NewTopic("single", 1, 1))
        seen = {n: scrape(cluster, n) for n in (1, 2, 3)}
        assert sum(m["kafka_server_replicamanager_leadercount"] for m in seen.values()) == 4
        assert sum(m["kafka_controller_kafkacontroller_activecontrollercount"] for m in seen.values()) == 1
        assert all(m["kafka_server_replicamanager_underreplicatedpartitions"] == 0 for m in seen.values())
        assert all(m["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0 for m in seen.values())
        assert seen[1]["kafka_server_replicamanager_partitioncount"] >= 3
        lone = cluster.leader("single")
        cluster.kill(lone)  # its partition offline; the others under-replicated where their leaders are
        survivor = next(n for n in (1, 2, 3) if n != lone)
        wait_for("the offline partition counted", lambda: scrape(cluster, survivor)[
            "kafka_controller_kafkacontroller_offlinepartitionscount"] == 1)
        wait_for("the under-replicated partitions counted", lambda: sum(
            scrape(cluster, n)["kafka_server_replicamanager_underreplicatedpartitions"]
            for n in (1, 2, 3) if n != lone) == 3)


def test_a_transaction_over_partitions_led_by_every_broker_commits_and_aborts(own_cluster):
    """The coordinator (the leader of __consumer_offsets) writes markers on the partitions it leads and sends
    WriteTxnMarkers to the other leaders: a read_committed consumer sees the committed transaction whole and
    nothing of the aborted one."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic

    created(admin(own_cluster.bootstrap), NewTopic("txn", 3, 3))
    assert sorted(own_cluster.partition("txn", i)["leader"] for i in range(3)) == [1, 2, 3]
    producer = Producer({"bootstrap.servers": own_cluster.bootstrap, "transactional.id": "copy-job"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("txn", f"kept-{i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("txn", f"aborted-{i}".encode(), partition=i % 3)
    producer.flush(60)
    producer.abort_transaction(60)
    producer.begin_transaction()
    producer.produce("txn", b"last", partition=0)
    producer.commit_transaction(60)
    consumer = Consumer({"bootstrap.servers": own_cluster.bootstrap, "group.id": "reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.subscribe(["txn"])
    seen = []
    try:
        def all_read():
            for m in consumer.consume(100, 0.5):
                if m.error() is None:
                    seen.append(m.value().decode())
            return "last" in seen and len(seen) >= 31

        wait_for("the committed records", all_read)
    finally:
        consumer.close()
    assert sorted(seen) == sorted([f"kept-{i}" for i in range(30)] + ["last"])

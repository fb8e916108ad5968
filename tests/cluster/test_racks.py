"""Racks (real processes: three controllers, three brokers in racks a, a, b): replicas of a partition spread over
the racks (Kafka's rack-aware assignment), and a consumer that names its rack (client.rack) reads from the
follower in its rack (KIP-392: the leader answers its Fetch with preferred_read_replica), exactly what was
written."""

import json
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from freshet.local.cluster import LocalCluster

from .conftest import DEADLINE, admin
from .test_metadata import created, wait_for

RACKS = ["a", "a", "b"]


@pytest.fixture(scope="module")
def racked(tmp_path_factory):
    with LocalCluster(3, directory=str(tmp_path_factory.mktemp("racked")), racks=RACKS) as c:
        yield c


def racks_of(metadata: dict) -> dict[int, str]:
    return {b["broker_id"]: b["rack"] for b in metadata["brokers"]}


def test_the_replicas_of_every_partition_span_the_racks(racked):
    created(admin(racked.bootstrap), NewTopic("spread", 8, 2))
    metadata = racked.metadata()
    racks = racks_of(metadata)
    assert racks == {1: "a", 2: "a", 3: "b"}
    [topic] = [t for t in metadata["topics"] if t["name"] == "spread"]
    # rack-unaware, Kafka's placement would put some partitions on brokers 1 and 2 only (both in rack a)
    assert all({racks[r] for r in p["replicas"]} == {"a", "b"} for p in topic["partitions"])
    # and what a client is told of the brokers carries their racks
    client = admin(racked.bootstrap)  # kept: a collected AdminClient aborts its pending futures
    listed = client.describe_cluster(request_timeout=30).result(60)
    assert {n.id: n.rack for n in listed.nodes} == racks


def test_a_consumer_with_client_rack_reads_from_its_racks_follower_exactly_what_was_written(racked):
    created(admin(racked.bootstrap), NewTopic("near", 1, 3, config={"min.insync.replicas": "2"}))
    part = racked.wait_until(lambda m: (p := racked.partition("near", 0, m)) and len(p["isr"]) == 3 and p,
                             DEADLINE, "the whole ISR")
    racks = racks_of(racked.metadata())
    client_rack = "b" if racks[part["leader"]] == "a" else "a"
    followers = {r for r in part["replicas"] if r != part["leader"] and racks[r] == client_rack}
    assert followers

    producer = Producer({"bootstrap.servers": racked.bootstrap, "enable.idempotence": True, "acks": "all"})
    written = [f"record-{i}".encode() for i in range(2000)]
    for value in written[:1000]:
        producer.produce("near", value, partition=0)
    assert producer.flush(60) == 0

    fetched_from: set[int] = set()
    lock = threading.Lock()

    def stats(text: str) -> None:  # librdkafka: which broker each partition is fetched from now
        partition = json.loads(text).get("topics", {}).get("near", {}).get("partitions", {}).get("0")
        if partition and partition.get("broker", -1) >= 0:
            with lock:
                fetched_from.add(partition["broker"])

    consumer = Consumer({"bootstrap.servers": racked.bootstrap, "group.id": "near-reader", "client.rack": client_rack,
                         "enable.auto.commit": False, "statistics.interval.ms": 200, "stats_cb": stats})
    consumer.assign([TopicPartition("near", 0, 0)])
    got: list[bytes] = []
    try:
        def read_until(count: int) -> bool:
            for m in consumer.consume(500, 0.5):
                if not m.error():
                    got.append(m.value())
            return len(got) >= count

        wait_for("the first thousand records", lambda: read_until(1000))
        for value in written[1000:]:  # written while the consumer reads from the follower
            producer.produce("near", value, partition=0)
        assert producer.flush(60) == 0
        wait_for("all the records", lambda: read_until(2000))
        wait_for("the client's statistics naming its fetch broker", lambda: (consumer.poll(0.3), fetched_from)[1])
        assert consumer.poll(1.0) is None  # nothing more than was written
    finally:
        consumer.close()
    assert got == written
    assert fetched_from & followers, f"fetched from {fetched_from}, not from the follower(s) {followers} in rack " \
                                     f"{client_rack}"
    assert part["leader"] not in fetched_from or fetched_from & followers


@pytest.mark.parametrize("racks", ["a,,b", "a,b c", ""])
def test_bad_racks_are_one_line_and_start_nothing(tmp_path, racks):
    from click.testing import CliRunner

    from freshet.cli.main import cli

    directory = tmp_path / "c"
    run = CliRunner().invoke(cli, ["cluster", "start", "--racks", racks, "--data-dir", str(directory)])
    assert run.exit_code == 1 and run.output.startswith("error: --racks") and len(run.output.splitlines()) == 1
    assert not directory.exists()

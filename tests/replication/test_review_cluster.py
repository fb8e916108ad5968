"""Review findings on a three-broker cluster (real processes): what a broker that is not a group's coordinator
answers. Kafka's brokers answer a group request NOT_COORDINATOR unless they lead the group's partition of
``__consumer_offsets`` (GroupCoordinator.validateGroupStatus / isActive); the client then asks FindCoordinator
again."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.replication.client import BrokerConnection
from freshet.local.cluster import LocalCluster

DEADLINE = 120.0
OFFSETS = "__consumer_offsets"


def _ask(cluster: LocalCluster, node: int, api_key: int, version: int, body: dict):
    host, port = cluster.bootstrap_of(node).rsplit(":", 1)

    async def ask():
        connection = BrokerConnection(host, int(port), "review-client")
        try:
            return await connection.request(api_key, version, body, timeout_s=20)
        except ConnectionError as exc:
            pytest.fail(f"broker {node} gave no answer to API {api_key}: {exc}")
        finally:
            connection.close()

    return asyncio.run(ask())


def _coordinator(cluster: LocalCluster, group: str) -> int:
    """FindCoordinator (v1, key type 0) until a broker is named (the first one creates __consumer_offsets)."""
    import time

    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        answer = _ask(cluster, 1, 10, 1, {"key": group, "key_type": 0})
        if answer.error_code == ErrorCode.none:
            return answer.node_id
        time.sleep(0.2)
    pytest.fail("no group coordinator named")


def test_a_broker_that_is_not_the_groups_coordinator_answers_offset_commit_and_fetch_not_coordinator(tmp_path):
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        from confluent_kafka.admin import AdminClient, NewTopic

        client = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 30000})
        for future in client.create_topics([NewTopic("t", 1, 3)], operation_timeout=60).values():
            future.result(60)
        coordinator = _coordinator(cluster, "g")
        cluster.wait_until(lambda m: any(t["name"] == OFFSETS for t in m["topics"]) and cluster.fully_replicated(m),
                           DEADLINE, "__consumer_offsets and t fully replicated")
        other = next(n for n in cluster.nodes if n != coordinator)

        fetched = _ask(cluster, other, 9, 3, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert fetched.error_code == ErrorCode.not_coordinator  # it answered NONE, offset -1, from its replica
        # (seen: the commit is appended to the follower's own replica of __consumer_offsets and never answered)
        commit = _ask(cluster, other, 8, 2, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_metadata": ""}]}]})
        assert commit.topics[0].partitions[0].error_code == ErrorCode.not_coordinator


def test_the_offsets_topic_of_a_three_broker_cluster_gets_three_replicas_though_two_were_down_when_first_asked(
        tmp_path):
    """Kafka creates ``__consumer_offsets`` with offsets.topic.replication.factor (3) and answers FindCoordinator
    COORDINATOR_NOT_AVAILABLE until enough brokers are up ("internal topic creation will fail until the cluster
    size meets this replication factor requirement"); it never creates it smaller on a cluster of that size."""
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        cluster.kill(2)
        cluster.kill(3)
        cluster.wait_until(lambda m: all(b["fenced"] for b in m["brokers"] if b["broker_id"] in (2, 3)), DEADLINE,
                           "brokers 2 and 3 fenced")
        _ask(cluster, 1, 10, 1, {"key": "g", "key_type": 0})  # the first FindCoordinator of the cluster
        # with the defect the topic is created at once (factor 1); else broker 1 declines, as its log says: either
        # way the first creation has been tried before the brokers come back (not a fixed wait for nothing)
        def tried(m):
            with open(cluster.log_path("broker", 1), encoding="utf-8", errors="replace") as log:
                declined = f"not creating {OFFSETS} yet: 1 live broker(s)" in log.read()
            return declined or any(t["name"] == OFFSETS for t in m["topics"])

        cluster.wait_until(tried, DEADLINE, f"broker 1 creating {OFFSETS} or declining to")
        cluster.restart(2)
        cluster.restart(3)
        _coordinator(cluster, "g")
        offsets = cluster.partition(OFFSETS, 0)
        assert len(offsets["replicas"]) == 3, offsets

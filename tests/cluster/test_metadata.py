"""What a Kafka client sees of a three-broker cluster: every broker, each partition's leader, replicas and ISR,
the real controller id; topics created, changed and deleted through any broker reach every broker; bad requests
answered with Kafka's error codes and nothing changed."""

import time

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType
from kio.schema.errors import ErrorCode

from .conftest import DEADLINE, admin


def wait_for(what: str, probe, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what} after {deadline} s")


def created(client, *topics: NewTopic) -> None:
    for future in client.create_topics(list(topics), operation_timeout=60).values():
        future.result(60)


def error_of(future) -> tuple[str, int]:
    with pytest.raises(KafkaException) as caught:
        future.result(60)
    err = caught.value.args[0]
    return err.name(), err.code()


def outcome(future) -> tuple[object, str | None]:
    """(result, None), or (None, the error's name)."""
    try:
        return future.result(60), None
    except KafkaException as exc:
        return None, exc.args[0].name()


def test_every_broker_answers_all_brokers_replicas_isr_and_the_real_controller(cluster):
    client = admin(cluster.bootstrap)
    print("before", client.list_topics(timeout=30).controller_id, cluster.metadata()["controller_id"])
    created(client, NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"}))
    controller = cluster.metadata()["controller_id"]
    assert controller in (1, 2, 3)
    print("controller", controller, client.list_topics(timeout=30).controller_id)
    for node_id in (1, 2, 3):  # each broker on its own answers for the whole cluster
        client = admin(cluster.bootstrap_of(node_id))
        md = wait_for("orders in the metadata", lambda: (m := client.list_topics(timeout=30)).topics.get("orders")
                      and m)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {b.port for b in md.brokers.values()} == {n.port for n in cluster.nodes.values()}
        parts = md.topics["orders"].partitions
        assert sorted(parts) == [0, 1, 2]
        for p in parts.values():
            assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
            assert p.leader == p.replicas[0] and p.error is None
        assert sorted(p.leader for p in parts.values()) == [1, 2, 3]  # leaders spread over the brokers
        described = client.describe_cluster(request_timeout=30).result(60)
        assert described.controller.id == controller
        assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    client = admin(cluster.bootstrap)  # kept: a future outlives no client
    description = client.describe_topics(TopicCollection(["orders"]), request_timeout=30)["orders"].result(60)
    assert [sorted(n.id for n in p.replicas) for p in description.partitions] == [[1, 2, 3]] * 3
    assert [p.leader.id for p in description.partitions] == [p.replicas[0].id for p in description.partitions]


def test_a_replication_factor_above_the_live_brokers_is_refused_and_changes_nothing(cluster):
    client = admin(cluster.bootstrap)
    before = cluster.metadata()["topics"]
    futures = client.create_topics([NewTopic("too-wide", 1, 4)], operation_timeout=60)
    assert error_of(futures["too-wide"]) == ("INVALID_REPLICATION_FACTOR", 38)
    futures = client.create_topics([NewTopic("bad-config", 1, 3, config={"min.insync.replicas": "zero"})])
    assert error_of(futures["bad-config"])[0] == "INVALID_CONFIG"
    futures = client.create_topics([NewTopic("too-wide", 1, 4)], validate_only=True)
    assert error_of(futures["too-wide"]) == ("INVALID_REPLICATION_FACTOR", 38)
    assert cluster.metadata()["topics"] == before
    assert "too-wide" not in client.list_topics(timeout=30).topics
    created(client, NewTopic("once", 1, 1))
    futures = client.create_topics([NewTopic("once", 2, 1)])
    assert error_of(futures["once"]) == ("TOPIC_ALREADY_EXISTS", 36)
    [once] = [t for t in cluster.metadata()["topics"] if t["name"] == "once"]
    assert len(once["partitions"]) == 1


def test_the_default_replication_factor_of_a_three_broker_cluster_is_three(cluster):
    client = admin(cluster.bootstrap)
    created(client, NewTopic("defaulted", 2))  # replication factor -1: default.replication.factor
    [topic] = [t for t in cluster.metadata()["topics"] if t["name"] == "defaulted"]
    assert [len(p["replicas"]) for p in topic["partitions"]] == [3, 3]


def test_partitions_configs_and_deletion_go_through_the_controller_to_every_broker(cluster):
    client = admin(cluster.bootstrap_of(1))
    created(client, NewTopic("growing", 2, 2))
    client.create_partitions([NewPartitions("growing", 4)], operation_timeout=60)["growing"].result(60)
    for node_id in (2, 3):
        other = admin(cluster.bootstrap_of(node_id))
        md = wait_for("4 partitions", lambda: len(other.list_topics(timeout=30).topics["growing"].partitions) == 4
                      and other.list_topics(timeout=30))
        assert all(len(p.replicas) == 2 for p in md.topics["growing"].partitions.values())
    assert error_of(client.create_partitions([NewPartitions("growing", 3)])["growing"])[0] == "INVALID_PARTITIONS"

    resource = ConfigResource(ResourceType.TOPIC, "growing")
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource.add_incremental_config(ConfigEntry("min.insync.replicas", "2",
                                                incremental_operation=AlterConfigOpType.SET))
    resource.add_incremental_config(ConfigEntry("retention.ms", "3600000",
                                                incremental_operation=AlterConfigOpType.SET))
    client.incremental_alter_configs([resource])[resource].result(60)
    other = admin(cluster.bootstrap_of(3))

    def configs_on_broker_3() -> dict:
        described = other.describe_configs([ConfigResource(ResourceType.TOPIC, "growing")])
        return {k: v.value for k, v in list(described.values())[0].result(60).items()}

    # broker 3 applies the change once its metadata long poll brings it
    wait_for("the configs on broker 3", lambda: (c := configs_on_broker_3())["min.insync.replicas"] == "2"
             and c["retention.ms"] == "3600000")
    [topic] = [t for t in cluster.metadata()["topics"] if t["name"] == "growing"]
    assert topic["configs"] == {"min.insync.replicas": "2", "retention.ms": "3600000"}
    bad = ConfigResource(ResourceType.TOPIC, "growing")
    bad.add_incremental_config(ConfigEntry("min.insync.replicas", "-1", incremental_operation=AlterConfigOpType.SET))
    assert error_of(client.incremental_alter_configs([bad])[bad])[0] == "INVALID_CONFIG"
    [topic] = [t for t in cluster.metadata()["topics"] if t["name"] == "growing"]
    assert topic["configs"]["min.insync.replicas"] == "2"

    client.delete_topics(["growing"], operation_timeout=60)["growing"].result(60)
    for node_id in (1, 2, 3):
        other = admin(cluster.bootstrap_of(node_id))
        wait_for(f"growing gone from broker {node_id}",
                 lambda: "growing" not in other.list_topics(timeout=30).topics)
    assert error_of(client.delete_topics(["growing"])["growing"])[0] == "UNKNOWN_TOPIC_OR_PART"


def test_min_insync_replicas_of_the_brokers_is_cluster_metadata(cluster):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    client = admin(cluster.bootstrap_of(2))
    resource = ConfigResource(ResourceType.BROKER, "3")  # set for broker 3, through broker 2
    resource.add_incremental_config(ConfigEntry("min.insync.replicas", "2",
                                                incremental_operation=AlterConfigOpType.SET))
    client.incremental_alter_configs([resource])[resource].result(60)
    assert cluster.metadata()["broker_configs"]["3"]["min.insync.replicas"] == "2"
    bad = ConfigResource(ResourceType.BROKER, "3")
    bad.add_incremental_config(ConfigEntry("min.insync.replicas", "0", incremental_operation=AlterConfigOpType.SET))
    assert error_of(client.incremental_alter_configs([bad])[bad])[0] == "INVALID_CONFIG"
    resource = ConfigResource(ResourceType.BROKER, "3")
    resource.add_incremental_config(ConfigEntry("min.insync.replicas", None,
                                                incremental_operation=AlterConfigOpType.DELETE))
    client.incremental_alter_configs([resource])[resource].result(60)
    assert "min.insync.replicas" not in cluster.metadata()["broker_configs"].get("3", {})


def test_the_one_node_broker_needs_no_election(broker, topic_name):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import _ElectionType

    client = admin(broker.bootstrap)
    created(client, NewTopic(topic_name, 2, 1))
    answer = client.elect_leaders(_ElectionType.PREFERRED, [TopicPartition(topic_name, 1),
                                                             TopicPartition(topic_name, 5)]).result(60)
    assert answer[TopicPartition(topic_name, 1)].name() == "ELECTION_NOT_NEEDED"
    assert answer[TopicPartition(topic_name, 5)].name() == "UNKNOWN_TOPIC_OR_PART"
    assert client.elect_leaders(_ElectionType.PREFERRED, None).result(60) == {}  # all: nothing needed


def test_acls_are_cluster_metadata_enforced_by_every_leader(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType)
    from confluent_kafka.admin import ResourceType as RT

    from freshet.local.cluster import LocalCluster

    with LocalCluster(3, directory=str(tmp_path / "c"),
                      broker_args=["--authorizer", "--allow-everyone-if-no-acl-found"]) as cluster:
        created(admin(cluster.bootstrap), NewTopic("locked", 3, 3), NewTopic("open", 1, 3))
        deny = AclBinding(RT.TOPIC, "locked", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.WRITE, AclPermissionType.DENY)
        first = admin(cluster.bootstrap_of(1))
        for future in first.create_acls([deny]).values():
            future.result(60)
        assert [a["resource_name"] for a in cluster.metadata()["acls"]] == ["locked"]
        everything = AclBindingFilter(RT.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                      AclPermissionType.ANY)
        second = admin(cluster.bootstrap_of(2))
        # another broker applies the change once its metadata long poll brings it (as Kafka's brokers do)
        wait_for("the ACL on broker 2", lambda: second.describe_acls(everything).result(60) == [deny])

        def produce(topic: str) -> list[str | None]:
            """Each delivery's error name, None when delivered: a KafkaError is never compared with None here,
            as confluent-kafka's KafkaError.__eq__(None) leaves a TypeError set that the next built-in call
            raises as a SystemError (see test_a_kafka_error_compared_with_none_leaves_an_exception_set)."""
            errors = []
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 30000})
            for p in range(3 if topic == "locked" else 1):  # every partition: every leader refuses alike
                producer.produce(topic, b"x", partition=p,
                                 on_delivery=lambda err, _m: errors.append(None if err is None else err.name()))
            producer.flush(60)
            return errors

        wait_for("every leader of locked refusing", lambda: set(produce("locked")) == {"TOPIC_AUTHORIZATION_FAILED"})
        assert produce("open") == [None]
        third = admin(cluster.bootstrap_of(3))
        [deleted] = third.delete_acls([everything]).values()
        assert deleted.result(60) == [deny]
        assert cluster.metadata()["acls"] == []
        wait_for("no ACL on broker 1", lambda: first.describe_acls(everything).result(60) == [])
        wait_for("every leader of locked accepting", lambda: produce("locked") == [None, None, None])


def test_a_kafka_error_compared_with_none_leaves_an_exception_set():
    """Why the test above compares error names, not KafkaErrors, with None: confluent-kafka's KafkaError
    richcompare turns anything not a KafkaError into an int with PyLong_AsLong and never checks the result, so
    ``[KafkaError(...)] == [None]`` (a leader still refusing while an ACL's removal propagates) answers False with a
    TypeError left set, and the next built-in call fails with "SystemError: <built-in function monotonic>
    returned a result with an exception set" (a fresh-clone run of the test above did). If this fails,
    confluent-kafka has fixed it."""
    from confluent_kafka import KafkaError

    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(SystemError, match="returned a result with an exception set") as caught:
        refused.__eq__(None)  # the slot that ``==`` runs, called where the check comes at once
    assert isinstance(caught.value.__cause__, TypeError)
    assert "NoneType" in str(caught.value.__cause__)


def test_scram_users_are_cluster_metadata(cluster):
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    first, second = admin(cluster.bootstrap_of(1)), admin(cluster.bootstrap_of(2))
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"s3cret", b"salt-of-alice")
    for future in first.alter_user_scram_credentials([upsert]).values():
        future.result(60)
    assert cluster.metadata()["users"] == {"alice": ["SCRAM-SHA-256"]}
    described = wait_for("alice on broker 2", lambda: outcome(second.describe_user_scram_credentials(["alice"])["alice"])[0])
    [info] = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_256, 8192)
    third = admin(cluster.bootstrap_of(3))
    deletion = UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)
    for future in third.alter_user_scram_credentials([deletion]).values():
        future.result(60)
    assert cluster.metadata()["users"] == {}
    wait_for("alice gone from broker 2",
             lambda: outcome(second.describe_user_scram_credentials(["alice"])["alice"])[1] == "RESOURCE_NOT_FOUND")


def test_client_quotas_are_cluster_metadata(cluster):
    from freshet.testing.raw_kafka import RawConnection

    def alter(bootstrap: str, value: float | None) -> int:
        with RawConnection(bootstrap) as conn:
            [entry] = conn.request(49, 1, {"entries": [{
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "ops": [{"key": "producer_byte_rate", "value": value or 0.0, "remove": value is None}]}],
                "validate_only": False}).entries
            return entry.error_code

    def described(bootstrap: str) -> dict:
        with RawConnection(bootstrap) as conn:
            answer = conn.request(48, 1, {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}],
                                          "strict": False})
            return {v.key: v.value for entry in answer.entries for v in entry.values}

    assert alter(cluster.bootstrap_of(1), 1024.0) == 0
    # enforced by every broker, once its metadata long poll brings the change
    wait_for("the quota on broker 2", lambda: described(cluster.bootstrap_of(2)) == {"producer_byte_rate": 1024.0})
    assert cluster.metadata()["quotas"] == [{"entity": [["user", "alice"]], "values": {"producer_byte_rate": 1024.0}}]
    assert alter(cluster.bootstrap_of(3), None) == 0
    assert cluster.metadata()["quotas"] == []
    wait_for("the quota gone from broker 1", lambda: described(cluster.bootstrap_of(1)) == {})


def test_a_share_groups_configs_are_cluster_metadata_and_go_with_the_group(cluster):
    """IncrementalAlterConfigs of a GROUP through any broker goes to the controller, as Kafka's GROUP configs: every
    broker describes it (before: only the broker asked had it); DeleteGroups at the group coordinator deletes them
    on every broker (before: kept by the broker asked)."""
    from freshet.testing.raw_kafka import RawConnection

    group_resource = 32  # Kafka's ConfigResource.Type.GROUP
    limit = "share.delivery.count.limit"

    def described(node_id: int) -> tuple[str, int]:
        with RawConnection(cluster.bootstrap_of(node_id)) as conn:
            [result] = conn.request(32, 4, {"resources": [{"resource_type": group_resource, "resource_name": "sg",
                                                           "configuration_keys": [limit]}],
                                            "include_synonyms": False, "include_documentation": False}).results
        [entry] = result.configs
        return entry.value, entry.config_source

    created(admin(cluster.bootstrap), NewTopic("shared-work", 1, 3))

    def group_coordinator() -> int | None:
        with RawConnection(cluster.bootstrap_of(1)) as conn:
            [found] = conn.request(10, 4, {"key_type": 0, "coordinator_keys": ["sg"]}).coordinators
        return found.node_id if found.error_code == ErrorCode.none else None

    coordinator = wait_for("the group coordinator", group_coordinator)
    asked = next(n for n in (1, 2, 3) if n != coordinator)
    with RawConnection(cluster.bootstrap_of(asked)) as conn:
        [altered] = conn.request(44, 1, {"resources": [{"resource_type": group_resource, "resource_name": "sg",
                                                        "configs": [{"name": limit, "config_operation": 0,
                                                                     "value": "3"}]}],
                                         "validate_only": False}).responses
    assert altered.error_code == ErrorCode.none, altered
    for node_id in (1, 2, 3):
        wait_for(f"the group config on broker {node_id}", lambda: described(node_id) == ("3", 8))  # GROUP_CONFIG
    assert cluster.metadata()["group_configs"] == {"sg": {limit: "3"}}

    with RawConnection(cluster.bootstrap_of(coordinator)) as conn:  # a member joins and leaves: an empty group
        for epoch in (0, -1):
            beat = conn.request(76, 1, {"group_id": "sg", "member_id": "m", "member_epoch": epoch, "rack_id": None,
                                        "subscribed_topic_names": ["shared-work"]})
            assert beat.error_code == ErrorCode.none, beat
        [deleted] = conn.request(42, 2, {"groups_names": ["sg"]}).results
    assert deleted.error_code == ErrorCode.none
    assert "sg" not in cluster.metadata()["group_configs"]
    for node_id in (1, 2, 3):
        wait_for(f"the default on broker {node_id}", lambda: described(node_id) == ("5", 5))  # DEFAULT_CONFIG


def test_the_controllers_raft_traffic_is_encrypted_with_a_secret_of_the_cluster(cluster):
    import os
    import stat

    from freshet.local.cluster import ask_controller

    mode = stat.S_IMODE(os.stat(cluster.password_file).st_mode)
    assert mode == 0o600 and len(open(cluster.password_file).readline().strip()) >= 16
    for address in cluster.controller_addresses:
        assert ask_controller(address, {"op": "status"}, password=cluster.password)["raft_encrypted"] is True


def test_a_consumer_groups_configs_are_cluster_metadata_and_its_coordinator_honours_them(cluster):
    """Kafka 4.0's consumer.session.timeout.ms / consumer.heartbeat.interval.ms (KIP-848 groups) set through any
    broker: in the controller's metadata, described by every broker, the group's coordinator answers heartbeats
    with the group's interval; out of the brokers' bounds: INVALID_CONFIG, nothing stored."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    from freshet.testing.raw_kafka import RawConnection

    group, interval = "cg-meta", "consumer.heartbeat.interval.ms"
    client = admin(cluster.bootstrap)

    def resource(configs):
        return ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                        else AlterConfigOpType.DELETE) for k, v in configs.items()])

    bad = resource({interval: "15001"})  # above group.consumer.max.heartbeat.interval.ms
    assert error_of(client.incremental_alter_configs([bad])[bad])[0] == "INVALID_CONFIG"
    assert group not in cluster.metadata().get("group_configs", {})
    good = resource({"consumer.session.timeout.ms": "50000", interval: "7000"})
    client.incremental_alter_configs([good])[good].result(60)
    assert cluster.metadata()["group_configs"][group] == {"consumer.session.timeout.ms": "50000", interval: "7000"}

    def described(node_id: int) -> str:
        with RawConnection(cluster.bootstrap_of(node_id)) as conn:
            [result] = conn.request(32, 4, {"resources": [{"resource_type": 32, "resource_name": group,
                                                           "configuration_keys": [interval]}],
                                            "include_synonyms": False, "include_documentation": False}).results
        return result.configs[0].value

    for node_id in (1, 2, 3):
        wait_for(f"the group config on broker {node_id}", lambda: described(node_id) == "7000")
    created(client, NewTopic("cg-meta-topic", 1, 3))

    def coordinator() -> int | None:
        with RawConnection(cluster.bootstrap_of(1)) as conn:
            [found] = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators
        return found.node_id if found.error_code == ErrorCode.none else None

    with RawConnection(cluster.bootstrap_of(wait_for("the group coordinator", coordinator))) as conn:
        beat = conn.request(68, 1, {"group_id": group, "member_id": "m-1", "member_epoch": 0, "instance_id": None,
                                    "rack_id": None, "rebalance_timeout": 30000,
                                    "subscribed_topic_names": ["cg-meta-topic"], "subscribed_topic_regex": None,
                                    "server_assignor": None, "topic_partitions": []})
        assert beat.error_code == ErrorCode.none and beat.heartbeat_interval.total_seconds() == 7.0
        conn.request(68, 1, {"group_id": group, "member_id": "m-1", "member_epoch": -1, "instance_id": None,
                             "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
                             "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None})
    gone = resource({"consumer.session.timeout.ms": None, interval: None})  # the module's other tests' metadata
    client.incremental_alter_configs([gone])[gone].result(60)
    assert group not in cluster.metadata().get("group_configs", {})


def test_a_partitions_size_is_one_replicas_not_the_sum_over_its_replicas(cluster):
    """`freshet topic describe`'s size per partition (DescribeLogDirs from every broker): the bytes of one replica,
    as on the leader's disk; it added the three replicas' up."""
    from kafka.admin import KafkaAdminClient

    from freshet.client.admin import TopicAdmin
    from freshet.client.produce import produce_records

    created(admin(cluster.bootstrap), NewTopic("sized", 1, 3))
    produce_records(cluster.bootstrap, "sized", [(None, b"x" * 500, None) for _ in range(40)])
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        def replica_sizes() -> list[int]:
            return sorted(p["partition_size"] for broker in kafka_admin.describe_log_dirs()
                          for log_dir in broker["log_dirs"] for t in log_dir["topics"] if t["name"] == "sized"
                          for p in t["partitions"])

        sizes = wait_for("three replicas of the same size", lambda: (s := replica_sizes()) and len(s) == 3
                         and s[0] == s[2] > 40 * 500 and s)
    finally:
        kafka_admin.close()
    (partition,) = TopicAdmin(cluster.bootstrap).describe_topic("sized").partitions
    assert partition.size_bytes == sizes[0] and partition.records == 40

"""KIP-430's authorized operations as Kafka answers them: the operations a principal may do on a topic, the
cluster or a group, computed by the authorizer every request goes through (DESCRIBE implied by READ, WRITE,
DELETE or ALTER; a DENY taking one away), every operation without an authorizer, INT32_MIN where they were not
asked for. Seen through confluent-kafka's AdminClient (describe_topics, describe_cluster,
describe_consumer_groups) and raw Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe requests."""

import uuid

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from freshet.local import BrokerProcess
from freshet.testing.cli import freshet
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

NOT_ASKED = -(2**31)
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
GROUP_OPS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}


def bits(operations) -> int:
    return sum(1 << op.value for op in operations)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A broker with an authorizer (on by default beside a SASL listener), User:admin its super user."""
    data = tmp_path_factory.mktemp("authorized-operations") / "data"
    for user, password in USERS.items():
        r = freshet("users", "add", user, "--password-stdin", "--data-dir", str(data), input=password + "\n")
        assert r.returncode == 0, r.stderr
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--super-user", "User:admin"]) as b:
        yield b


def conf(b, user, **extra):
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], "log_level": 0, **extra}


def raw(b, user) -> RawConnection:
    """A raw connection authenticated as ``user`` (SASL PLAIN)."""
    conn = RawConnection(b.bootstrap)
    assert conn.request(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
    token = f"\0{user}\0{USERS[user]}".encode()
    assert conn.request(36, 2, {"auth_bytes": token}).error_code == ErrorCode.none
    return conn


def allow(admin, resource_type, name, principal, *operations, permission=AclPermissionType.ALLOW):
    bindings = [AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", op, permission)
                for op in operations]
    for future in admin.create_acls(bindings).values():
        future.result(10)


def topic_operations(admin, name):
    described = admin.describe_topics(TopicCollection([name]), include_authorized_operations=True)[name].result(15)
    return set(described.authorized_operations)


def group_operations(admin, group):
    described = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(15)
    return set(described.authorized_operations)


def commit_offset(bootstrap_conf, topic, group):
    """A classic group that exists by its committed offset."""
    c = Consumer({**bootstrap_conf, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()


def join_consumer_group(conn, group, topic):
    """A KIP-848 consumer group with one member (ConsumerGroupHeartbeat)."""
    answer = conn.request(68, 1, {
        "group_id": group, "member_id": "m-" + uuid.uuid4().hex[:6], "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": [topic],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
    assert answer.error_code == ErrorCode.none, answer


def test_without_an_authorizer_every_operation_is_authorized(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"{topic_name}-g"
    commit_offset({"bootstrap.servers": broker.bootstrap}, topic_name, group)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic_operations(admin, topic_name) == TOPIC_OPS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == CLUSTER_OPS
    assert group_operations(admin, group) == GROUP_OPS
    # not asked for: none told
    assert admin.describe_cluster().result(15).authorized_operations is None
    with RawConnection(broker.bootstrap) as conn:
        asked = conn.request(3, 10, {"topics": [{"name": topic_name, "topic_id": None}],
                                     "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
                                     "include_topic_authorized_operations": True})
        assert (asked.cluster_authorized_operations, asked.topics[0].topic_authorized_operations) == (
            bits(CLUSTER_OPS), bits(TOPIC_OPS))
        quiet = conn.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                     "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert quiet.topics[0].topic_authorized_operations == NOT_ASKED
        groups = conn.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        assert groups.groups[0].authorized_operations == NOT_ASKED


def test_a_topics_operations_follow_its_acls(guarded):
    admin = AdminClient(conf(guarded, "admin"))
    reader, everything_but_write, missing = (f"ops-{uuid.uuid4().hex[:8]}" for _ in range(3))
    for name in (reader, everything_but_write):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    allow(admin, ResourceType.TOPIC, reader, "User:alice", AclOperation.READ)
    allow(admin, ResourceType.TOPIC, everything_but_write, "User:alice", AclOperation.ALL)
    allow(admin, ResourceType.TOPIC, everything_but_write, "User:alice", AclOperation.WRITE,
          permission=AclPermissionType.DENY)
    alice = AdminClient(conf(guarded, "alice"))
    assert topic_operations(alice, reader) == {AclOperation.READ, AclOperation.DESCRIBE}  # DESCRIBE by READ
    assert topic_operations(alice, everything_but_write) == TOPIC_OPS - {AclOperation.WRITE}
    assert topic_operations(admin, reader) == TOPIC_OPS  # a super user
    with raw(guarded, "alice") as conn:
        wanted = [{"name": n, "topic_id": None} for n in (reader, missing)]
        answer = conn.request(3, 12, {"topics": wanted, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": True})
        # a topic alice may not describe: refused, and nothing told of it
        assert [(t.name, t.error_code, t.topic_authorized_operations) for t in answer.topics] == [
            (reader, ErrorCode.none, bits({AclOperation.READ, AclOperation.DESCRIBE})),
            (missing, ErrorCode.topic_authorization_failed, NOT_ASKED)]
        paged = conn.request(75, 0, {"topics": [{"name": reader}, {"name": missing}],
                                     "response_partition_limit": 10, "cursor": None})
        assert sorted((t.name, t.error_code, t.topic_authorized_operations) for t in paged.topics) == sorted([
            (reader, ErrorCode.none, bits({AclOperation.READ, AclOperation.DESCRIBE})),
            (missing, ErrorCode.topic_authorization_failed, NOT_ASKED)])
    with raw(guarded, "admin") as conn:  # a missing topic one may describe: what one could do once it exists
        answer = conn.request(3, 12, {"topics": [{"name": missing, "topic_id": None}],
                                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": True})
        assert (answer.topics[0].error_code, answer.topics[0].topic_authorized_operations) == (
            ErrorCode.unknown_topic_or_partition, bits(TOPIC_OPS))
    assert missing not in admin.list_topics(timeout=10).topics  # nothing created


def test_the_clusters_operations_follow_its_acls_and_describing_it_needs_none(guarded):
    admin = AdminClient(conf(guarded, "admin"))
    allow(admin, ResourceType.BROKER, "kafka-cluster", "User:bob", AclOperation.ALTER)
    bob = AdminClient(conf(guarded, "bob"))
    described = bob.describe_cluster(include_authorized_operations=True).result(15)
    assert set(described.authorized_operations) == {AclOperation.ALTER, AclOperation.DESCRIBE}
    assert set(admin.describe_cluster(include_authorized_operations=True).result(15).authorized_operations) == \
        CLUSTER_OPS
    # carol has no ACL on the cluster: it is described to her all the same (as Kafka does), her operations none
    carol = AdminClient(conf(guarded, "carol"))
    described = carol.describe_cluster(include_authorized_operations=True).result(15)
    # (confluent-kafka shows no operations as None; the raw answers below tell 0 from "not asked")
    assert [n.id for n in described.nodes] == [0] and described.authorized_operations is None
    with raw(guarded, "bob") as conn:
        old = conn.request(3, 10, {"topics": [], "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": True,
                                   "include_topic_authorized_operations": False})
        assert old.cluster_authorized_operations == bits({AclOperation.ALTER, AclOperation.DESCRIBE})
        answer = conn.request(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert (answer.error_code, answer.cluster_authorized_operations) == (
            ErrorCode.none, bits({AclOperation.ALTER, AclOperation.DESCRIBE}))
    with raw(guarded, "carol") as conn:
        old = conn.request(3, 10, {"topics": [], "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": True,
                                   "include_topic_authorized_operations": False})
        assert old.cluster_authorized_operations == 0
        answer = conn.request(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert (answer.error_code, [b.broker_id for b in answer.brokers], answer.cluster_authorized_operations) == (
            ErrorCode.none, [0], 0)
        answer = conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert answer.cluster_authorized_operations == NOT_ASKED


def test_a_groups_operations_follow_its_acls(guarded):
    admin = AdminClient(conf(guarded, "admin"))
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    classic, consumer, share = f"{topic}-classic", f"{topic}-consumer", f"{topic}-share"
    admin.create_topics([NewTopic(topic, 1)])[topic].result(10)
    commit_offset(conf(guarded, "admin"), topic, classic)
    with raw(guarded, "admin") as conn:
        join_consumer_group(conn, consumer, topic)
        joined = conn.request(76, 1, {"group_id": share, "member_id": "m-" + uuid.uuid4().hex[:6],
                                      "member_epoch": 0, "rack_id": None, "subscribed_topic_names": [topic]})
        assert joined.error_code == ErrorCode.none, joined
    assert group_operations(admin, classic) == GROUP_OPS
    assert group_operations(admin, consumer) == GROUP_OPS
    for group in (classic, consumer, share):
        allow(admin, ResourceType.GROUP, group, "User:alice", AclOperation.READ)
    alice = AdminClient(conf(guarded, "alice"))
    assert group_operations(alice, classic) == {AclOperation.READ, AclOperation.DESCRIBE}
    assert group_operations(alice, consumer) == {AclOperation.READ, AclOperation.DESCRIBE}
    read = bits({AclOperation.READ, AclOperation.DESCRIBE})
    with raw(guarded, "alice") as conn:
        unknown = f"{topic}-nobody"
        described = conn.request(15, 5, {"groups": [classic, unknown], "include_authorized_operations": True})
        # a group she may not describe: refused, nothing told
        assert [(g.group_id, g.error_code, g.authorized_operations) for g in described.groups] == [
            (classic, ErrorCode.none, read), (unknown, ErrorCode.group_authorization_failed, NOT_ASKED)]
        for api_key, group in ((69, consumer), (77, share)):  # ConsumerGroupDescribe, ShareGroupDescribe
            described = conn.request(api_key, 1, {"group_ids": [group, unknown], "include_authorized_operations": True})
            assert [(g.group_id, g.error_code, g.authorized_operations) for g in described.groups] == [
                (group, ErrorCode.none, read), (unknown, ErrorCode.group_authorization_failed, NOT_ASKED)]
        described = conn.request(77, 1, {"group_ids": [share], "include_authorized_operations": False})
        assert described.groups[0].authorized_operations == NOT_ASKED
    with raw(guarded, "admin") as conn:  # not a consumer group: an error, and no operations told (as Kafka)
        described = conn.request(69, 1, {"group_ids": [classic], "include_authorized_operations": True})
        assert (described.groups[0].error_code, described.groups[0].authorized_operations) == (
            ErrorCode.group_id_not_found, NOT_ASKED)

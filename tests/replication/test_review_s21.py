"""Review of the broker work of session 21 (KIP-430 authorized operations and the handlers it touched: Metadata,
DescribeCluster, DescribeTopicPartitions). Each test states what Kafka answers; an xfail (strict) one fails until
the code does it. Raw requests against the shared broker, or the handler in process with a stand-in context."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.handlers import cluster as handlers
from freshet.broker.security.acls import DESCRIBE, TOPIC
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


@pytest.mark.parametrize("endpoint_type, code", [(2, ErrorCode.mismatched_endpoint_type),
                                                 (0, ErrorCode.unsupported_endpoint_type),
                                                 (7, ErrorCode.unsupported_endpoint_type)])
def test_describe_cluster_refuses_an_endpoint_type_other_than_a_brokers(broker, endpoint_type, code):
    """Kafka's AuthHelper.computeDescribeClusterResponse (KIP-919): a DescribeCluster v1+ asking a broker for the
    controllers (EndpointType 2) answers MISMATCHED_ENDPOINT_TYPE, an endpoint type Kafka does not know (0, 3+)
    UNSUPPORTED_ENDPOINT_TYPE, each with no brokers; a client (the admin client of a KIP-919 bootstrap-controllers
    setup) must not take the brokers for the controllers it asked for."""
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": endpoint_type})
        assert (answer.error_code, answer.brokers) == (code, ())
        assert answer.error_message
        ok = conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert ok.error_code == ErrorCode.none and len(ok.brokers) == 1


def test_describe_topic_partitions_refuses_a_cursor_outside_the_topics_asked_for(broker, topic_name):
    """Kafka's DescribeTopicPartitionsRequestHandler: a cursor naming a topic the request's list does not hold, or a
    negative partition, is an InvalidRequestException, answered as INVALID_REQUEST for each topic asked for (the
    request's getErrorResponse); Freshet answered an empty page or a page from the cursor as if it were valid."""
    create_topic(broker.bootstrap, topic_name, 2)
    with RawConnection(broker.bootstrap) as conn:
        outside = conn.request(75, 0, {"topics": [{"name": topic_name}], "response_partition_limit": 10,
                                       "cursor": {"topic_name": topic_name + "-not-asked", "partition_index": 0}})
        assert [(t.name, t.error_code, t.partitions) for t in outside.topics] == [
            (topic_name, ErrorCode.invalid_request, ())]
        negative = conn.request(75, 0, {"topics": [{"name": topic_name}], "response_partition_limit": 10,
                                        "cursor": {"topic_name": topic_name, "partition_index": -1}})
        assert [(t.name, t.error_code) for t in negative.topics] == [(topic_name, ErrorCode.invalid_request)]
        fine = conn.request(75, 0, {"topics": [{"name": topic_name}], "response_partition_limit": 10,
                                    "cursor": {"topic_name": topic_name, "partition_index": 1}})
        assert [(t.error_code, [p.partition_index for p in t.partitions]) for t in fine.topics] == [
            (ErrorCode.none, [1])]


def test_metadata_for_an_unknown_topic_id_answers_unknown_topic_id(broker, topic_name):
    """Kafka's handleTopicMetadataRequest (Metadata v12+ by topic id): an id no topic has answers UNKNOWN_TOPIC_ID
    with the id and no name, not UNKNOWN_TOPIC_OR_PARTITION (the error of a topic asked for by name)."""
    create_topic(broker.bootstrap, topic_name, 1)
    nobody = uuid.uuid4()
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.request(3, 12, {"topics": [{"name": None, "topic_id": nobody}], "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [
            (ErrorCode.unknown_topic_id, None, nobody)]


def test_metadata_by_topic_id_tells_no_name_to_a_principal_that_may_not_describe_the_topic():
    """Kafka (KafkaApis.handleTopicMetadataRequest, ``useTopicId``): a topic asked for by id that the principal may
    not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED with its id and a null name ("topic IDs are not considered
    sensitive information"); Freshet answered with the topic's name, which a principal without DESCRIBE must not
    learn (the same request by name tells nothing either)."""
    topic_id = uuid.uuid4()
    secret = SimpleNamespace(name="payroll-secret", topic_id=topic_id, internal=False, partitions=[object()])
    broker = SimpleNamespace(cluster=None, registry=SimpleNamespace(topics={secret.name: secret}, by_id={topic_id: secret}),
                             config=SimpleNamespace(node_id=0, cluster_id="c", auto_create_topics=False),
                             advertised=lambda listener: ("127.0.0.1", 9092))
    refused = []

    def allowed(operation, resource_type, name):
        refused.append((operation, resource_type, name))
        return False

    ctx = SimpleNamespace(broker=broker, version=12, connection=None, allowed=allowed,
                          authorized_operations=lambda resource_type, name: 0)
    request = SimpleNamespace(topics=[SimpleNamespace(name=None, topic_id=topic_id)], allow_auto_topic_creation=False,
                              include_topic_authorized_operations=True)
    answer = handlers.metadata(ctx, request)
    assert (DESCRIBE, TOPIC, secret.name) in refused  # decided on the topic's name, as Kafka's authorizer is asked
    assert [(t["error_code"], t["name"], t["topic_id"]) for t in answer["topics"]] == [
        (ErrorCode.topic_authorization_failed, None, topic_id)]


def test_a_kip848_coordinator_assigns_a_topic_it_holds_no_replica_of(tmp_path):
    """Kafka's group coordinator assigns from the metadata image (every topic of the cluster). Freshet's KIP-848
    coordinator subscribes, assigns and answers topic ids from its own TopicRegistry, which in a cluster holds only
    the topics it has a replica of: a ``group.protocol=consumer`` member subscribed to a replication factor 1 topic
    led by another broker is assigned nothing, every heartbeat (seen on a LocalCluster(3): epoch 1, empty
    assignment). The classic coordinator's commits were fixed for the same hole (077513a, partition_exists); here the
    handler runs in process against a broker stand-in whose cluster view holds the topic and whose registry does
    not, as the coordinator of a three-broker cluster is for a topic placed elsewhere."""
    from freshet.broker.cluster.view import ClusterView, PartitionInfo, TopicInfo
    from freshet.broker.groups.consumer import ConsumerGroupCoordinator
    from freshet.broker.groups.topics import ClusterTopics
    from freshet.broker.handlers.consumer_groups import consumer_group_heartbeat
    from freshet.broker.topics.registry import TopicRegistry

    topic_id = uuid.uuid4()
    view = ClusterView(topics={"elsewhere": TopicInfo("elsewhere", topic_id, (PartitionInfo(0, (2,), (2,), 2, 0, 0),))})
    registry = TopicRegistry(str(tmp_path))  # this broker (the coordinator, node 1) holds no replica of it
    coordinator = ConsumerGroupCoordinator(registry)
    coordinator.topics = ClusterTopics(lambda: view)  # as the cluster membership sets it
    broker = SimpleNamespace(registry=registry, consumer_groups=coordinator,
                             groups=SimpleNamespace(groups={}), offsets=SimpleNamespace(offsets={}),
                             share_groups=SimpleNamespace(groups={}),
                             cluster=SimpleNamespace(view=view, coordinates=lambda: True))
    ctx = SimpleNamespace(broker=broker, version=1, allowed=lambda *_: True, peer_host="/127.0.0.1",
                          header=SimpleNamespace(client_id="review"))
    joined = consumer_group_heartbeat(ctx, SimpleNamespace(
        group_id="g", member_id="m-1", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=["elsewhere"],
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=[]))
    assert joined["error_code"] == ErrorCode.none
    assert joined["assignment"] == {"topic_partitions": [{"topic_id": topic_id, "partitions": [0]}]}

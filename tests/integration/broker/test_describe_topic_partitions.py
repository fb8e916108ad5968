"""DescribeTopicPartitions (KIP-966) as confluent-kafka's describe_topics and a raw client page through
it: partitions by topic name from a cursor, at most the limit asked for, unknown topics answered and not
created."""

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic


def test_describe_topics_through_confluent_kafka(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.describe_topics(TopicCollection([topic_name, f"{topic_name}-missing"]))
    described = futures[topic_name].result(10)
    got = [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr]) for p in described.partitions]
    assert got == [(i, 0, [0], [0]) for i in range(3)]
    assert not described.is_internal
    try:
        futures[f"{topic_name}-missing"].result(10)
        raise AssertionError("a missing topic was described")
    except KafkaException as exc:
        assert exc.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    assert f"{topic_name}-missing" not in admin.list_topics(timeout=10).topics  # nothing created


def test_pages_through_every_partition_with_the_cursor(broker, topic_name):
    names = [f"{topic_name}-{c}" for c in "abc"]
    for name, count in zip(names, (3, 1, 4)):
        create_topic(broker.bootstrap, name, count)
    wanted = [{"name": n} for n in reversed(names)] + [{"name": f"{topic_name}-nope"}]
    seen, cursor, pages = [], None, 0
    with RawConnection(broker.bootstrap) as conn:
        while True:
            response = conn.request(75, 0, {"topics": wanted, "response_partition_limit": 2,
                                            "cursor": cursor})
            pages += 1
            for t in response.topics:
                if t.error_code:
                    seen.append((t.name, t.error_code.name))
                seen += [(t.name, p.partition_index) for p in t.partitions]
                assert len(t.partitions) <= 2
            if response.next_cursor is None:
                break
            cursor = {"topic_name": response.next_cursor.topic_name,
                      "partition_index": response.next_cursor.partition_index}
        every = conn.request(75, 0, {"topics": [], "response_partition_limit": 2000, "cursor": None})
    expected = [(n, i) for n, count in zip(names, (3, 1, 4)) for i in range(count)]
    assert [s for s in seen if s[1] != "unknown_topic_or_partition"] == expected
    assert seen.count((f"{topic_name}-nope", "unknown_topic_or_partition")) == 1
    assert pages == 4  # 8 partitions, 2 a page (the unknown topic costs no partition)
    everything = {t.name for t in every.topics}
    assert set(names) <= everything and "__consumer_offsets" in everything and every.next_cursor is None

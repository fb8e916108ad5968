"""Client quotas set at run time (AlterClientQuotas / DescribeClientQuotas, KIP-546): validated entry by
entry with Kafka's error codes, persisted, enforced at once on produce and fetch (throttle_time seen by
librdkafka's throttle callback), and bytes per client id on /metrics."""

import urllib.request
import uuid

from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

DESCRIBE, ALTER = 48, 49


def alter(conn, entries, validate_only=False):
    return conn.request(ALTER, 1, {"entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "ops": [{"key": k, "value": v if v is not None else 0.0, "remove": v is None} for k, v in ops]}
        for entity, ops in entries], "validate_only": validate_only}).entries


def describe(conn, components=(), strict=False):
    r = conn.request(DESCRIBE, 1, {"components": [{"entity_type": t, "match_type": m, "match": n}
                                                  for t, m, n in components], "strict": strict})
    assert r.error_code == 0, r.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in r.entries}


def test_quotas_are_altered_described_and_survive_a_restart(own_broker):
    with RawConnection(own_broker.bootstrap) as conn:
        results = alter(conn, [
            ([("user", "alice")], [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]),
            ([("client-id", None)], [("producer_byte_rate", 4096.0)]),  # the default client id
            ([("user", "bob"), ("client-id", "etl")], [("consumer_byte_rate", 512.0)]),
        ])
        assert [r.error_code for r in results] == [0, 0, 0]
        assert describe(conn) == {
            (("user", "alice"),): {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0},
            (("client-id", None),): {"producer_byte_rate": 4096.0},
            (("client-id", "etl"), ("user", "bob")): {"consumer_byte_rate": 512.0},
        }
        # filters: exact, default, any; strict leaves out entities with other types
        assert list(describe(conn, [("user", 0, "alice")])) == [(("user", "alice"),)]
        assert list(describe(conn, [("client-id", 1, None)], strict=True)) == [(("client-id", None),)]
        assert len(describe(conn, [("user", 2, None)])) == 2
        assert list(describe(conn, [("user", 2, None)], strict=True)) == [(("user", "alice"),)]
        # removing a key; validate_only changes nothing
        assert alter(conn, [([("user", "alice")], [("consumer_byte_rate", None)])])[0].error_code == 0
        assert alter(conn, [([("user", "alice")], [("producer_byte_rate", 1.0)])], validate_only=True)[0] \
            .error_code == 0
    own_broker.restart()
    with RawConnection(own_broker.bootstrap) as conn:
        assert describe(conn, [("user", 0, "alice")]) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}


def test_bad_entries_are_refused_one_by_one_and_change_nothing(broker):
    user = "quota-" + uuid.uuid4().hex[:6]
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, [([("user", user)], [("producer_byte_rate", 100.0)])])[0].error_code == 0
        before = describe(conn, [("user", 0, user)])
        results = alter(conn, [
            ([("user", user)], [("producer_byte_rate", -5.0)]),  # not positive
            ([("user", user)], [("producer_byte_rate", 10.5)]),  # bytes are whole
            ([("user", user)], [("request_percentage", 50.0)]),  # not enforced here, so not taken
            ([("user", user)], [("no_such_quota", 1.0)]),
            ([("user", user), ("user", "x")], [("producer_byte_rate", 1.0)]),  # a type twice
            ([("ip", "127.0.0.1")], [("connection_creation_rate", 1.0)]),
            ([("group", user)], [("producer_byte_rate", 1.0)]),
            ([], [("producer_byte_rate", 1.0)]),
            ([("user", "")], [("producer_byte_rate", 1.0)]),
            ([("user", user)], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
        ])
        assert [r.error_code for r in results] == [ErrorCode.invalid_request] * 10
        assert all(r.error_message for r in results)
        assert describe(conn, [("user", 0, user)]) == before
        bad = conn.request(DESCRIBE, 1, {"components": [{"entity_type": "group", "match_type": 0, "match": "x"}],
                                         "strict": False})
        assert bad.error_code == ErrorCode.invalid_request and bad.entries is None


def _metric(url, client_id, request):
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "freshet_client_bytes_total" and sample.labels == {"client_id": client_id,
                                                                               "request": request}:
                return sample.value
    return 0


def test_byte_rate_quotas_throttle_the_client_they_name_and_no_other(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    slow, fast = "slow-" + uuid.uuid4().hex[:6], "fast-" + uuid.uuid4().hex[:6]
    with RawConnection(broker.bootstrap) as conn:
        results = alter(conn, [([("client-id", slow)], [("producer_byte_rate", 50_000.0),
                                                        ("consumer_byte_rate", 50_000.0)])])
        assert results[0].error_code == 0
    throttled = {slow: [], fast: []}

    def producer(client_id):
        return Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
                         "throttle_cb": lambda event: throttled[client_id].append(event.throttle_time)})

    for client_id in (slow, fast):
        p = producer(client_id)
        for _ in range(400):
            p.produce(topic_name, b"x" * 1000)
        assert p.flush(60) == 0  # throttled, never dropped
        p.poll(1)
    assert throttled[slow] and not throttled[fast]

    fetch_throttled = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": slow, "group.id": slow,
                         "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": 10,
                         "throttle_cb": lambda event: fetch_throttled.append(event.throttle_time)})
    consumer.subscribe([topic_name])
    got = 0
    while got < 800:
        got += sum(1 for m in consumer.consume(500, 1) if m.error() is None)
    consumer.close()
    assert got == 800 and fetch_throttled
    assert _metric(broker.metrics_url, slow, "produce") >= 400_000
    assert _metric(broker.metrics_url, slow, "fetch") >= 800_000

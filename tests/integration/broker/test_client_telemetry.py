"""Client telemetry (KIP-714): librdkafka clients push their metrics, the broker keeps the latest per client
and serves them on /metrics; bad pushes get Kafka's error codes and leave what was kept alone."""

import gzip
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from prometheus_client.parser import text_string_to_metric_families

from freshet.local.broker import BrokerProcess
from freshet.testing.polling import wait_for
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

SUBSCRIBE, PUSH = 71, 72


def _telemetry_broker(tmp_path, push_interval_ms):
    return BrokerProcess(data_dir=str(tmp_path / "data"), metrics=True,
                         extra_args=["--telemetry-push-interval-ms", str(push_interval_ms)])


@pytest.fixture
def telemetry_broker(tmp_path):
    """Clients push every half second: their metrics show up quickly."""
    with _telemetry_broker(tmp_path, 500) as b:
        yield b


@pytest.fixture
def ten_minute_telemetry_broker(tmp_path):
    """A push interval no test outlasts: a second push is too soon however slow the machine, and no client is
    forgotten for silence mid-test."""
    with _telemetry_broker(tmp_path, 600_000) as b:
        yield b


def samples(url, name):
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_producers_and_consumers_push_their_metrics(telemetry_broker):
    b = telemetry_broker
    create_topic(b.bootstrap, "pushed", 1)
    producer = Producer({"bootstrap.servers": b.bootstrap, "client.id": "telemetry-producer", "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "client.id": "telemetry-consumer", "group.id": "tg",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["pushed"])

    def pushed(name, client_id):
        producer.produce("pushed", b"x" * 100)
        producer.poll(0)
        consumer.poll(0.1)
        return [s for s in samples(b.metrics_url, name) if s.labels["client_id"] == client_id]

    wait_for(lambda: pushed("org_apache_kafka_producer_node_request_latency_avg", "telemetry-producer"),
             what="the producer's request latency on /metrics")
    wait_for(lambda: pushed("org_apache_kafka_consumer_coordinator_assigned_partitions", "telemetry-consumer")
             and pushed("org_apache_kafka_consumer_coordinator_assigned_partitions", "telemetry-consumer")[0].value == 1,
             what="the consumer's assigned partitions on /metrics")
    latency = pushed("org_apache_kafka_producer_node_request_latency_avg", "telemetry-producer")
    assert latency[0].labels["client_software"].startswith("confluent-kafka-python")
    assert latency[0].labels["node_id"] in ("0", "-1") and uuid.UUID(latency[0].labels["client_instance_id"])
    producer.flush(10)
    consumer.close()


def _payload(value):
    data = MetricsData()
    metric = data.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "org.apache.kafka.producer.record.queue.time.avg"
    metric.gauge.data_points.add().as_double = value
    return data.SerializeToString()


def test_bad_pushes_are_refused_and_keep_what_was_pushed(ten_minute_telemetry_broker):
    b = ten_minute_telemetry_broker
    name = "org_apache_kafka_producer_record_queue_time_avg"
    with RawConnection(b.bootstrap) as conn:
        sub = conn.request(SUBSCRIBE, 0, {"client_instance_id": uuid.UUID(int=0)})
        assert sub.error_code == 0 and sub.client_instance_id != uuid.UUID(int=0)
        assert sub.requested_metrics == ("org.apache.kafka.",) and sub.push_interval.total_seconds() == 600
        me = sub.client_instance_id
        push = {"client_instance_id": me, "subscription_id": sub.subscription_id, "terminating": False,
                "compression_type": 1, "metrics": gzip.compress(_payload(7.0))}
        assert conn.request(PUSH, 0, push).error_code == 0
        kept = [s.value for s in samples(b.metrics_url, name) if s.labels["client_instance_id"] == str(me)]
        assert kept == [7.0]
        for change, code in [
            ({"subscription_id": sub.subscription_id + 1}, ErrorCode.unknown_subscription_id),
            ({"metrics": gzip.compress(_payload(8.0))}, ErrorCode.throttling_quota_exceeded),  # too soon
            ({"terminating": True, "metrics": b"not gzip"}, ErrorCode.invalid_record),
            ({"terminating": True, "compression_type": 0, "metrics": b"\xff\xff\xff"}, ErrorCode.invalid_record),
            ({"terminating": True, "compression_type": 9}, ErrorCode.unsupported_compression_type),
            ({"terminating": True, "metrics": b"x" * (1024 * 1024 + 1)}, ErrorCode.telemetry_too_large),
            ({"client_instance_id": uuid.UUID(int=0)}, ErrorCode.invalid_request),
        ]:
            assert conn.request(PUSH, 0, {**push, **change}).error_code == code, change
        assert [s.value for s in samples(b.metrics_url, name) if s.labels["client_instance_id"] == str(me)] == [7.0]
        last = {**push, "terminating": True, "metrics": gzip.compress(_payload(9.0))}
        assert conn.request(PUSH, 0, last).error_code == 0
        assert conn.request(PUSH, 0, last).error_code == ErrorCode.invalid_request  # after terminating
        assert [s.value for s in samples(b.metrics_url, name) if s.labels["client_instance_id"] == str(me)] == [9.0]


def test_off_unless_asked_for(broker):
    """Without --telemetry-push-interval-ms the broker does not offer the telemetry APIs, so librdkafka never
    subscribes (nor logs a new client instance id)."""
    with RawConnection(broker.bootstrap) as conn:
        versions = conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert {k.api_key for k in versions.api_keys}.isdisjoint({SUBSCRIBE, PUSH})

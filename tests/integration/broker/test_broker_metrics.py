"""The broker's Prometheus endpoint: per-partition log figures (beside clients' traffic and telemetry, tested
with quotas and telemetry), and nothing else answered."""

import socket
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from freshet.client import TopicAdmin


def _samples(url: str) -> dict[tuple[str, str, str], float]:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {(f.name, s.labels["topic"], s.labels["partition"]): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if "topic" in s.labels}


def test_log_figures_per_partition(broker, topic_name):
    TopicAdmin(broker.bootstrap).create_topic(topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic_name, b"v%d" % i, partition=1)
    producer.flush(10)
    samples = _samples(broker.metrics_url)
    assert samples[("kafka_log_log_numlogsegments", topic_name, "0")] == 1
    assert samples[("kafka_log_log_logendoffset", topic_name, "1")] == 10
    assert samples[("kafka_cluster_partition_highwatermark", topic_name, "1")] == 10
    assert samples[("kafka_log_log_logstartoffset", topic_name, "1")] == 0
    assert samples[("kafka_log_log_size", topic_name, "0")] == 0
    assert samples[("kafka_log_log_size", topic_name, "1")] > 0


def test_other_paths_and_methods_are_refused(broker):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(broker.metrics_url.replace("/metrics", "/admin"), timeout=5)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(broker.metrics_url, data=b"x", method="POST"), timeout=5)
    assert e.value.code == 405


def test_a_client_that_sends_garbage_does_not_stop_the_endpoint(broker):
    host, port = "127.0.0.1", int(broker.metrics_url.split(":")[2].split("/")[0])
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"\x00\xff garbage without an end of headers")
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"x" * 100_000)  # longer than any request line it reads
        s.shutdown(socket.SHUT_WR)
        s.recv(100)
    assert _samples(broker.metrics_url)  # still answering

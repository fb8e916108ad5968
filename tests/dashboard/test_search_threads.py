"""Streamed searches run on the console's own few search threads and stop when their reader goes away."""

import json
import threading

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.dashboard.routers import messages
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

from .served import open_stream, served

RECORDS = 400_000


@pytest.fixture(scope="module")
def big_topic(broker):
    """One partition of 400,000 small JSON records: a search for a value no record has reads them all."""
    name = "console-search-threads"
    create_topic(broker.bootstrap, name, 1, {"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "lz4"})
    for n in range(RECORDS):
        producer.produce(name, b'{"n": %d, "kind": "tick"}' % n, b"k%d" % n)
        if n % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return name


@pytest.fixture(scope="module")
def app(broker, big_topic):
    collector = Collector(broker.bootstrap)
    collector.collect()
    return create_app(collector)


def search_path(topic: str) -> str:
    return f"/api/topics/{topic}/messages?format=stream&start=oldest&value=absent&max_scan=100000000"


def search_threads() -> int:
    return sum(t.name.startswith("console-search") for t in threading.enumerate())


def test_a_search_stops_when_its_reader_goes_away(app, big_topic):
    before = len(messages.finished)
    with served(app) as port:
        conn, first = open_stream(port, search_path(big_topic))
        progress = json.loads(first)["progress"]
        assert progress["total"] == RECORDS and progress["scanned"] < RECORDS
        conn.close()
        wait_for(lambda: len(messages.finished) > before, 120, "the search to end")
    [ended] = list(messages.finished)[before:]
    assert ended["topic"] == big_topic and ended["outcome"] == "cancelled", ended
    assert ended["scanned"] < RECORDS


def test_many_searches_at_once_use_a_bounded_pool_and_leave_the_api_answering(app, big_topic):
    with served(app) as port:
        streams = [open_stream(port, search_path(big_topic))[0] for _ in range(messages.SEARCH_THREADS)]
        waiting = [open_stream_without_body(port, search_path(big_topic)) for _ in range(2)]
        assert search_threads() <= messages.SEARCH_THREADS
        # the rest of the API does not wait for the searches (they used to park the default executor's threads)
        with TestClient(app) as client:
            answer = client.get(f"/api/topics/{big_topic}")
        assert answer.status_code == 200 and answer.json()["configs"]["retention.ms"]["value"] == "-1"
        assert messages.running["scans"] >= 1, "the searches should still be scanning"
        for conn in streams + waiting:
            conn.close()
        wait_for(lambda: messages.running["scans"] == 0, 180, "every search to stop")
    assert search_threads() <= messages.SEARCH_THREADS
    assert not [f for f in messages.finished if f["topic"] == big_topic and f["outcome"] == "done"]


def open_stream_without_body(port: int, path: str):
    """A search that waits for a search thread: its request sent, nothing read."""
    import socket

    conn = socket.create_connection(("127.0.0.1", port), timeout=120)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return conn

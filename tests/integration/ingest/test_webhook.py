"""``freshet webhook``: each record POSTed signed, with its idempotency key; failures retried with backoff,
refused or hopeless records moved to the dead-letter topic; the position kept in the consumer group, so a
second run posts nothing again."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.ingest.webhook import verify_signature
from freshet.testing.ingest import read_messages
from freshet.testing.topics import create_topic

SECRET = b"s3cret"


class Receiver(BaseHTTPRequestHandler):
    """Answers by the record's value: ok 200; flaky 500 twice then 200; poison 400; down always 503."""

    calls: list = []
    seen: dict = {}

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        record = json.loads(body)
        value = record["value"]["data"]
        Receiver.calls.append({"value": value, "body": body, "key": self.headers["idempotency-key"],
                               "signature": self.headers["x-freshet-signature"],
                               "attempt": int(self.headers["x-freshet-attempt"])})
        Receiver.seen[value] = Receiver.seen.get(value, 0) + 1
        status = {"ok": 200, "poison": 400, "down": 503}.get(value, 200)
        if value == "flaky":
            status = 500 if Receiver.seen[value] <= 2 else 200
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.calls, Receiver.seen = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def webhook(bootstrap, topic, url, *extra, secret="s3cret"):
    env = {"FRESHET_WEBHOOK_SECRET": secret} if secret else {}
    return subprocess.run([sys.executable, "-m", "freshet.cli.main", "webhook", "-b", bootstrap, "--from", topic,
                           "--url", url, "--backoff-ms", "20", "--max-attempts", "3", "--idle-exit", "2", *extra],
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, **env})


def test_signed_retried_dead_lettered_and_committed(broker, topic_name, receiver):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, value in enumerate(["ok", "flaky", "poison", "down", "ok"]):
        producer.produce(topic_name, json.dumps(value).encode(), f"k{i}".encode(), headers=[("trace", b"t")])
    producer.flush(10)
    run = webhook(broker.bootstrap, topic_name, receiver)
    assert run.returncode == 0, run.stderr
    assert "3 records delivered" in run.stderr and "2 dead-lettered" in run.stderr
    calls = Receiver.calls
    assert [c["value"] for c in calls] == ["ok", "flaky", "flaky", "flaky", "poison", "down", "down", "down", "ok"]
    assert [c["attempt"] for c in calls if c["value"] == "flaky"] == [1, 2, 3]
    assert {c["key"] for c in calls if c["value"] == "flaky"} == {f"{topic_name}/0/1"}  # one key for every retry
    assert all(verify_signature(SECRET, c["body"], c["signature"]) for c in calls)
    assert not verify_signature(b"other", calls[0]["body"], calls[0]["signature"])
    assert not verify_signature(SECRET, calls[0]["body"] + b" ", calls[0]["signature"])
    envelope = json.loads(calls[0]["body"])
    assert (envelope["topic"], envelope["offset"], envelope["key"], envelope["headers"]) == (
        topic_name, 0, {"type": "STRING", "data": "k0"}, {"trace": "t"})
    dead = read_messages(broker.bootstrap, f"{topic_name}.dead-letter", 1)
    assert [(k, v) for _, _, k, v, _ in dead] == [(b"k2", b'"poison"'), (b"k3", b'"down"')]
    reasons = [dict(h) for *_, h in dead]
    assert reasons[0]["freshet.dead-letter.reason"].startswith(b"HTTP 400")
    assert reasons[0]["freshet.dead-letter.attempts"] == b"1"  # a 400 is the receiver refusing: no retry
    assert reasons[1]["freshet.dead-letter.attempts"] == b"3" and reasons[1]["trace"] == b"t"
    assert reasons[1]["freshet.dead-letter.source"] == f"{topic_name}/0/3".encode()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"freshet-webhook-{topic_name}"})
    assert consumer.committed([TopicPartition(topic_name, 0)], 10)[0].offset == 5
    consumer.close()
    again = webhook(broker.bootstrap, topic_name, receiver)
    assert again.returncode == 0 and len(Receiver.calls) == 9  # the position held: nothing posted twice


def test_bad_settings_are_one_line_errors(broker, topic_name, receiver):
    create_topic(broker.bootstrap, topic_name, 1)
    for args, secret, words in ((["--url", "ftp://x"], "s", "http:// or https://"), ([], None, "--secret"),
                                (["--from", "missing-topic"], "s", "does not exist")):
        cmd_topic = topic_name if "--from" not in args else args[args.index("--from") + 1]
        extra = [a for a in args if a not in ("--from", "missing-topic")]
        url = extra[1] if extra else receiver
        run = webhook(broker.bootstrap, cmd_topic, url, secret=secret)
        assert run.returncode == 1 and words in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr

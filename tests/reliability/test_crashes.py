"""What the broker acknowledged is there, once, in order: across SIGKILLs, torn writes and crashes
with committed group offsets."""

import glob
import os
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import consumer_config, producer_config
from freshet.client.produce import produce_waiting
from freshet.format.record_batch import encode_batch
from freshet.testing.crash import read_everything, verify_exactly_once_in_order
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """One CA and broker certificate (freshet security init) for the module's SASL_SSL brokers."""
    import subprocess
    import sys

    directory = tmp_path_factory.mktemp("crash-certs")
    subprocess.run([sys.executable, "-m", "freshet.cli.main", "security", "init", "--dir", str(directory)], check=True,
                   capture_output=True)
    return directory


@pytest.fixture(params=["PLAINTEXT", "SASL_SSL"])
def crash_broker(request, tmp_path, monkeypatch):
    """A broker of the test's own on a plaintext listener, or on SASL_SSL with every client of this process
    authenticating (SCRAM over TLS): crashes must not care how clients connect."""
    import subprocess
    import sys

    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    extra = []
    if request.param == "SASL_SSL":
        certs = request.getfixturevalue("certs")
        subprocess.run([sys.executable, "-m", "freshet.cli.main", "users", "add", "crash", "--password", "crash-pw",
                        "--data-dir", str(data)], check=True, capture_output=True)
        extra = ["--super-user", "User:crash", "--ssl-certfile", str(certs / "broker.pem"),
                 "--ssl-keyfile", str(certs / "broker-key.pem")]
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_SSL", "FRESHET_SASL_MECHANISM": "SCRAM-SHA-512",
                                "FRESHET_SASL_USERNAME": "crash", "FRESHET_SASL_PASSWORD": "crash-pw",
                                "FRESHET_SSL_CA_LOCATION": str(certs / "ca.pem")}.items():
            monkeypatch.setenv(variable, value)
    b = BrokerProcess(data_dir=str(data), listeners=[request.param], extra_args=["--cleaner-interval-ms", "3600000", *extra])
    b.start()
    yield b
    b.close()


def test_three_sigkills_during_idempotent_produce(crash_broker, topic_name):
    own_broker = crash_broker
    create_topic(own_broker.bootstrap, topic_name, 6)
    acked: list[bytes] = []
    failed: list = []
    done = threading.Event()

    def produce():
        # reconnect.backoff.max.ms: librdkafka's backoff after the refused connects grows to 10 s; the broker is
        # back within a second or two, and the property is the log's, not the client's patience
        producer = Producer(producer_config(own_broker.bootstrap, {"message.timeout.ms": 120000, "linger.ms": 2,
                                                                   "reconnect.backoff.max.ms": 250}))

        def on_delivery(err, msg):
            (failed if err else acked).append(err or msg.value())

        i = 0
        while not done.is_set():
            # while the broker is down librdkafka's queue fills: wait for room, as a real producer does
            produce_waiting(producer, topic_name, b"%09d" % i, partition=i % 6, on_delivery=on_delivery)
            i += 1
            if i % 500 == 0:
                producer.poll(0.01)
        producer.flush(120)

    writer = threading.Thread(target=produce)
    writer.start()
    kills = 0
    for _ in range(3):
        # killed mid-produce: once 2000 more records are acknowledged (the producer goes on all along), however
        # long that takes on a busy machine, not after a fixed time (on a quiet one, seconds meant 100k records
        # to read back)
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 2000 or failed, 120, "2000 records acknowledged", 0.02)
        own_broker.kill()
        own_broker.start()
        kills += 1
        before = len(acked)
        wait_for(lambda: len(acked) > before or failed, 60, "producing to resume after the restart", 0.05)
    before = len(acked)
    wait_for(lambda: len(acked) >= before + 2000 or failed, 120, "2000 records acknowledged after the last restart",
             0.02)
    done.set()
    writer.join(180)
    assert kills == 3 and acked and not failed
    stored = read_everything(own_broker.bootstrap, topic_name, 6)
    report = verify_exactly_once_in_order(stored, acked)
    assert report["duplicates"] == 0 and report["lost"] == 0 and report["out_of_order"] == 0, report


def test_torn_write_is_cut_and_nothing_acknowledged_is_lost(crash_broker, topic_name):
    own_broker = crash_broker
    create_topic(own_broker.bootstrap, topic_name, 6)
    producer = Producer(producer_config(own_broker.bootstrap))
    acked = []
    for i in range(3000):
        producer.produce(topic_name, b"%09d" % i, partition=i % 6,
                         on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
    producer.flush(30)
    own_broker.kill()
    torn = encode_batch([(b"k", b"never-acknowledged" * 20, 1)])
    for p in range(6):
        [segment] = glob.glob(os.path.join(own_broker.data_dir, "topics", topic_name, str(p), "*.log"))
        with open(segment, "ab") as f:
            f.write(torn[: len(torn) // 2] if p % 2 else torn[:-3] + b"\xff\xff\xff")  # torn, or corrupt tail
    own_broker.start()
    stored = read_everything(own_broker.bootstrap, topic_name, 6)
    report = verify_exactly_once_in_order(stored, acked)
    assert report["lost"] == 0 and report["duplicates"] == 0 and report["unexpected"] == 0, report
    with open(own_broker.log_path, "rb") as f:
        log = f.read()
    assert log.count(b"torn or corrupt tail") >= 6


def test_committed_offsets_survive_sigkill(crash_broker, topic_name):
    own_broker = crash_broker
    create_topic(own_broker.bootstrap, topic_name, 3)
    consumer = Consumer(consumer_config(own_broker.bootstrap, "crash-group"))
    offsets = [TopicPartition(topic_name, p, 100 + p) for p in range(3)]
    producer = Producer(producer_config(own_broker.bootstrap))
    for i in range(600):
        producer.produce(topic_name, b"x", partition=i % 3)
    producer.flush(10)
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()
    own_broker.kill()
    own_broker.start()
    probe = Consumer(consumer_config(own_broker.bootstrap, "crash-group"))
    committed = probe.committed([TopicPartition(topic_name, p) for p in range(3)], timeout=10)
    probe.close()
    assert [tp.offset for tp in committed] == [100, 101, 102]

"""Disk full, slow clients, oversized frames and produce quotas: the broker stays up and fair."""

import os
import socket
import struct
import subprocess
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import decode_records, encode_batch, iter_batches
from freshet.local import BrokerProcess
from freshet.testing.raw_kafka import RawConnection, fetch, produce
from freshet.testing.topics import create_topic

KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error




@pytest.fixture
def small_disk(tmp_path):
    mountpoint = tmp_path / "small-disk"
    mountpoint.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mountpoint)], check=False,
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.decode().strip()}")
    yield str(mountpoint)
    subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_disk_full_gives_storage_error_keeps_serving_and_recovers(small_disk):
    # the broker's own log off the small disk: it is the data directory that fills up
    with BrokerProcess(data_dir=os.path.join(small_disk, "data"),
                       log_path=os.path.join(os.path.dirname(small_disk), "broker.log")) as b:
        create_topic(b.bootstrap, "fills-up", config={"segment.bytes": "1048576"})
        filler = os.path.join(small_disk, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (3 * 1024 * 1024))
        batch = encode_batch([(b"k", os.urandom(50_000), 1)])
        codes = []
        with RawConnection(b.bootstrap) as conn:
            for _ in range(200):
                r = produce(conn, "fills-up", 0, batch)
                codes.append(r.error_code)
                if r.error_code:
                    break
            assert codes[-1] == KAFKA_STORAGE_ERROR and codes.count(0) > 0
            stored = fetch(conn, "fills-up", 0, 0)  # reads still served
            assert stored.error_code == 0 and stored.high_watermark == codes.count(0)
            assert len(list(iter_batches(stored.records))) >= 1
            # another attempt while full: refused again, nothing half-written becomes visible
            assert produce(conn, "fills-up", 0, batch).error_code == KAFKA_STORAGE_ERROR
            os.unlink(filler)  # space returns
            after = produce(conn, "fills-up", 0, batch)
            assert after.error_code == 0 and after.base_offset == codes.count(0)
            deadline = time.monotonic() + 10
            while fetch(conn, "fills-up", 0, 0).high_watermark < after.base_offset + 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert b.proc.poll() is None  # never crashed


def test_slow_client_is_cut_off_without_affecting_others(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--frame-timeout-ms", "1000"]) as b:
        create_topic(b.bootstrap, "busy")
        slow = socket.create_connection(("127.0.0.1", b.port))
        slow.sendall(struct.pack(">i", 200) + b"\x00\x03")  # starts a 200-byte request, then trickles
        closed = threading.Event()

        def trickle():
            try:
                for _ in range(50):
                    slow.sendall(b"\x00")
                    time.sleep(0.2)
            except OSError:
                closed.set()
            if slow.recv(1) == b"":
                closed.set()

        t = threading.Thread(target=trickle)
        t.start()
        with RawConnection(b.bootstrap) as conn:  # a well-behaved client, meanwhile
            for i in range(20):
                assert produce(conn, "busy", 0, encode_batch([(b"k", b"v%d" % i, 1)])).error_code == 0
        t.join(30)
        assert closed.is_set()
        slow.close()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(tmp_path):
    """connections.max.idle.ms: a connection that sends nothing for that long is closed; one that keeps
    sending requests, each within it, stays open however long it lives."""
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--idle-timeout-ms", "800"]) as b:
        create_topic(b.bootstrap, "idle")
        idle = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        with RawConnection(b.bootstrap) as busy:
            started = time.monotonic()
            for i in range(12):  # 2.4 s in all, 0.2 s between requests
                assert produce(busy, "idle", 0, encode_batch([(b"k", b"v%d" % i, 1)])).error_code == 0
                time.sleep(0.2)
            assert idle.recv(1) == b""  # closed by the broker (recv would time out after 10 s otherwise)
            assert time.monotonic() - started < 10
        idle.close()


def test_produce_quota_throttles_but_keeps_every_record(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--producer-byte-rate", "200000"]) as b:
        create_topic(b.bootstrap, "quota")
        batch = encode_batch([(b"k", b"x" * 100_000, 1)])
        throttles = []
        with RawConnection(b.bootstrap) as conn:
            for _ in range(10):  # 1 MB in a burst against a 200 kB/s quota
                r = conn.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                    {"name": "quota", "partition_data": [{"index": 0, "records": batch}]}]})
                assert r.responses[0].partition_responses[0].error_code == 0
                throttles.append(r.throttle_time.total_seconds() * 1000)
            assert throttles[0] == 0 and max(throttles) > 0
            values = [r.value for _, bb in iter_batches(fetch(conn, "quota", 0, 0, max_bytes=10 << 20).records)
                      for r in decode_records(bb)]
        assert len(values) == 10


def test_slow_consumer_does_not_grow_broker_memory(tmp_path):
    def rss_kb(pid):
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    with BrokerProcess(data_dir=str(tmp_path / "d")) as b:
        create_topic(b.bootstrap, "firehose")
        batch = encode_batch([(b"k", os.urandom(1000), 1)] * 500)  # ~0.5 MB
        with RawConnection(b.bootstrap) as conn:
            produce(conn, "firehose", 0, batch)
            baseline = rss_kb(b.proc.pid)
            offset = 0
            for i in range(400):  # 200 MB in, while one slow reader takes 1 batch per 20 written
                produce(conn, "firehose", 0, batch, acks=1)
                if i % 20 == 0:
                    part = fetch(conn, "firehose", 0, offset, max_bytes=1 << 20)
                    for h, _ in iter_batches(part.records):
                        offset = h.last_offset + 1
            grown_mb = (rss_kb(b.proc.pid) - baseline) / 1024
        assert grown_mb < 100, f"broker RSS grew by {grown_mb:.0f} MB"

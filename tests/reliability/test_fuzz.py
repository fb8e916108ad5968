"""Mutated frames at the decoder and at a live broker; findings kept as regression tests.
(benchmarks/fuzz.py runs the same with 1,000,000 frames each.)"""

import struct
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.broker.framing import FrameError
from freshet.broker.protocol import decode_request, read_request_header
from freshet.local import BrokerProcess
from freshet.log import encode_batch
from freshet.testing.fuzz import encode_request, fuzz_decoder, fuzz_live
from freshet.testing.raw_kafka import RawConnection, SteadyClient, fetch, produce


def test_decoder_survives_mutated_frames():
    report = fuzz_decoder(50_000, seed=11)
    assert report.frames == 50_000 and report.decoded > 1000 and report.rejected > 1000
    assert report.findings == []


def test_finding_huge_array_count_is_rejected_not_allocated():
    # found by the fuzzer: kio's native decoder tried to allocate 246 GB for this and aborted the process
    frame = bytearray(encode_request(3, 4, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False}))
    header = read_request_header(bytes(frame))
    struct.pack_into(">i", frame, header.body_offset, 0x7FFFFFF0)  # topics array count
    with pytest.raises(FrameError, match="cannot fit"):
        decode_request(bytes(frame), header)


def test_finding_null_for_a_non_nullable_array_is_rejected():
    # found by the fuzzer: a null ListOffsets topics array reached the handler
    frame = bytearray(encode_request(2, 3, {"replica_id": -1, "isolation_level": 0, "topics": []}))
    header = read_request_header(bytes(frame))
    struct.pack_into(">i", frame, header.body_offset + 5, -1)
    with pytest.raises(FrameError, match="non-null|cannot fit"):
        decode_request(bytes(frame), header)


def test_live_broker_survives_mutated_frames_and_keeps_serving(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path / "d")) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for name in ("fuzz-target", "fuzz-canary"):
            admin.create_topics([NewTopic(name, 1)])[name].result(10)
        with RawConnection(b.bootstrap) as conn:
            for i in range(10):
                produce(conn, "fuzz-canary", 0, encode_batch([(b"k", b"canary-%d" % i, int(time.time() * 1000))]))
            before = fetch(conn, "fuzz-canary", 0, 0)
        client = SteadyClient(b.bootstrap, "fuzz-target")
        client.start()
        report = fuzz_live("127.0.0.1", b.port, 5_000, seed=5)
        client.stop()
        assert report.frames == 5_000
        assert client.failures == [] and client.requests > 0
        assert b.proc.poll() is None
        with RawConnection(b.bootstrap) as conn:
            after = fetch(conn, "fuzz-canary", 0, 0)
        assert (after.high_watermark, bytes(after.records)) == (before.high_watermark, bytes(before.records))
        with open(b.log_path) as log:
            assert "Traceback" not in log.read()

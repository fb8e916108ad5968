"""Mutated frames at the decoder and at a live broker; findings kept as regression tests.
(benchmarks/fuzz.py runs the same with 1,000,000 frames each.)"""

import struct
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.broker.wire.protocol import decode_request
from freshet.format.errors import FrameError
from freshet.format.framing import read_request_header
from freshet.format.record_batch import encode_batch
from freshet.local import BrokerProcess
from freshet.testing.fuzz import encode_request, fuzz_decoder, fuzz_live, fuzz_records
from freshet.testing.raw_kafka import RawConnection, SteadyClient, fetch, produce


def test_decoder_survives_mutated_frames():
    report = fuzz_decoder(50_000, seed=11)
    assert report.frames == 50_000 and report.decoded > 1000 and report.rejected > 1000
    assert report.findings == []


def test_records_decoder_survives_mutated_records_of_resealed_batches():
    # a header key that is not UTF-8 raised UnicodeDecodeError here (on a compacted topic: out of the Produce handler)
    report = fuzz_records(30_000, seed=3)
    assert report.frames == 30_000 and report.decoded > 1000 and report.rejected > 1000
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


def test_share_group_requests_fuzzed_against_a_live_queue_change_nothing_they_should_not(tmp_path):
    """Mutated ShareGroupHeartbeat / ShareFetch / ShareAcknowledge frames that name a real topic id and group:
    the broker keeps serving, and a share group the fuzzer does not belong to keeps its queue as it was."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    from freshet.client.queue import set_group_configs
    from freshet.client.share_groups import describe_share_group

    with BrokerProcess(data_dir=str(tmp_path / "d")) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("fuzz-queue", 1)])["fuzz-queue"].result(10)
        set_group_configs(b.bootstrap, "canary", {"share.auto.offset.reset": "earliest"})
        set_group_configs(b.bootstrap, "fuzzed", {"share.auto.offset.reset": "earliest"})
        with RawConnection(b.bootstrap) as conn:
            produce(conn, "fuzz-queue", 0, encode_batch([(None, b"job-%d" % i, 1_700_000_000_000) for i in range(20)]))
            meta = conn.request(3, 12, {"topics": [{"name": "fuzz-queue", "topic_id": None}],
                                        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        tid = meta.topics[0].topic_id
        canary = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "canary", "log_level": 3,
                                "share.acknowledgement.mode": "explicit"})
        canary.subscribe(["fuzz-queue"])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m for m in canary.poll(0.5) if m.error() is None]
        for m in got[:10]:
            canary.acknowledge(m, AcknowledgeType.ACCEPT)
        for m in got[10:]:
            canary.acknowledge(m, AcknowledgeType.RELEASE)
        canary.commit_sync(10)
        canary.close()
        before = describe_share_group(b.bootstrap, "canary").partitions
        parts = [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 3, "acknowledge_types": [1, 2, 3, 0]}]}]
        seeds = [
            encode_request(76, 1, {"group_id": "fuzzed", "member_id": "fz", "member_epoch": 0, "rack_id": None,
                                   "subscribed_topic_names": ["fuzz-queue"]}),
            encode_request(76, 1, {"group_id": "fuzzed", "member_id": "fz", "member_epoch": 1, "rack_id": None,
                                   "subscribed_topic_names": None}),
            encode_request(78, 1, {"group_id": "fuzzed", "member_id": "fz", "share_session_epoch": 0, "max_wait": 0,
                                   "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 5, "batch_size": 5,
                                   "topics": [{"topic_id": tid, "partitions": [
                                       {"partition_index": 0, "acknowledgement_batches": []}]}],
                                   "forgotten_topics_data": []}),
            encode_request(78, 2, {"group_id": "fuzzed", "member_id": "fz", "share_session_epoch": 1, "max_wait": 0,
                                   "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 5, "batch_size": 5,
                                   "topics": [{"topic_id": tid, "partitions": parts}],
                                   "forgotten_topics_data": [{"topic_id": tid, "partitions": [0]}]}),
            encode_request(79, 1, {"group_id": "fuzzed", "member_id": "fz", "share_session_epoch": 2,
                                   "topics": [{"topic_id": tid, "partitions": parts}]}),
            encode_request(77, 1, {"group_ids": ["fuzzed", "canary"], "include_authorized_operations": False}),
            encode_request(90, 1, {"groups": [{"group_id": "canary", "topics": None}]}),
        ]
        report = fuzz_live("127.0.0.1", b.port, 3_000, seed=11, seeds=seeds)
        assert report.frames == 3_000 and b.proc.poll() is None
        after = describe_share_group(b.bootstrap, "canary").partitions
        assert [(p.start_offset, p.available, p.acknowledged, p.archived) for p in after] == \
               [(p.start_offset, p.available, p.acknowledged, p.archived) for p in before] == [(10, 10, 0, 0)]
        with open(b.log_path) as log:
            assert "Traceback" not in log.read()


def test_sasl_handshakes_and_authenticated_connections_fuzzed(tmp_path):
    """Mutated SASL exchanges on fresh connections, then every API's mutated frames on connections that
    authenticated as a user without ACLs: the broker keeps serving, nobody authenticates by accident, and the
    credentials, the ACLs and a canary topic stay as they were."""
    import socket
    import subprocess
    import sys

    from freshet.testing.raw_kafka import RawConnection

    data = tmp_path / "d"
    for user in ("admin", "fuzzer"):
        subprocess.run([sys.executable, "-m", "freshet.cli.main", "users", "add", user, "--password", f"{user}-pw",
                        "--data-dir", str(data)], check=True, capture_output=True)
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT", "PLAINTEXT"],
                       extra_args=["--super-user", "User:ANONYMOUS", "--max-failed-authentications", "0"]) as b:
        plain = b.bootstrap_for("PLAINTEXT")  # the operator's door (ANONYMOUS is a super user here)
        admin = AdminClient({"bootstrap.servers": plain})
        admin.create_topics([NewTopic("fuzz-canary", 1)])["fuzz-canary"].result(10)
        with RawConnection(plain) as conn:
            produce(conn, "fuzz-canary", 0, encode_batch([(b"k", b"canary", int(time.time() * 1000))]))
            before = fetch(conn, "fuzz-canary", 0, 0)
        security_files = {name: (data / "security" / name).read_bytes() if (data / "security" / name).exists() else b""
                          for name in ("scram-credentials.json", "acls.json")}
        port = b.ports["SASL_PLAINTEXT"]
        handshake = [encode_request(17, 1, {"mechanism": m}) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
        tokens = [encode_request(36, v, {"auth_bytes": t}) for v in (0, 1, 2)
                  for t in (b"\0fuzzer\0wrong", b"n,,n=fuzzer,r=abcdefghijklmnop", b"c=biws,r=x,p=AAAA")]
        report = fuzz_live("127.0.0.1", port, 2_000, seed=3, seeds=handshake + tokens)
        assert report.frames == 2_000 and b.proc.poll() is None

        def authenticated() -> socket.socket:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            for frame in (encode_request(17, 1, {"mechanism": "PLAIN"}),
                          encode_request(36, 2, {"auth_bytes": b"\0fuzzer\0fuzzer-pw"})):
                s.sendall(struct.pack(">i", len(frame)) + frame)
                size = struct.unpack(">i", s.recv(4))[0]
                while size > 0:
                    size -= len(s.recv(size))
            return s

        report = fuzz_live("127.0.0.1", port, 3_000, seed=4, connect=authenticated,
                           skip_apis=set())  # destructive APIs too: the fuzzer's user may do nothing
        assert report.frames == 3_000 and b.proc.poll() is None
        with RawConnection(plain) as conn:
            after = fetch(conn, "fuzz-canary", 0, 0)
        assert (after.high_watermark, bytes(after.records)) == (before.high_watermark, bytes(before.records))
        assert {name: (data / "security" / name).read_bytes() if (data / "security" / name).exists() else b""
                for name in security_files} == security_files
        with open(b.log_path) as log:
            assert "Traceback" not in log.read()

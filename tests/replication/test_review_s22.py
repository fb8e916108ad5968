"""Review of 51aedc3 (encode_response keeps the answers kio wrote, by their body) against the shared broker: what a
client on the wire sees. Pipelined requests each get their own correlation id, in order; an answer kept while the
topics stayed is not given after they changed; the error paths (an unsupported version, a malformed frame) answer
or close as before."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from freshet.broker.wire.protocol import ZERO_UUID, response_schema
from freshet.format.framing import read_response_header, request_header, size_prefixed
from freshet.testing.raw_kafka import RawConnection
from freshet.testing.topics import create_topic

API_VERSIONS = {"client_software_name": "review", "client_software_version": "22"}


def _metadata_request(topic: str, version: int) -> dict:
    return {"topics": [{"name": topic, "topic_id": ZERO_UUID}] if version >= 10 else [{"name": topic}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _decoded(frame: bytes, api_key: int, version: int):
    schema = response_schema(api_key, version)
    correlation_id, pos = read_response_header(frame, api_key, schema.__flexible__)
    result = entity_reader(schema)(frame, pos)
    return correlation_id, result[0] if isinstance(result, tuple) else result.value


def test_pipelined_requests_each_get_their_own_correlation_id_in_order(broker, topic_name):
    """Identical requests sent back to back on one connection (the kept answer each time) and others between them,
    flexible (header v1) and not (header v0): every answer carries its request's correlation id, in order, and
    the same request gets the same body."""
    create_topic(broker.bootstrap, topic_name, 2)
    asked = [(18, 3, API_VERSIONS), (3, 12, _metadata_request(topic_name, 12)), (18, 3, API_VERSIONS),
             (3, 8, _metadata_request(topic_name, 8)), (3, 12, _metadata_request(topic_name, 12)),
             (18, 0, {}), (3, 8, _metadata_request(topic_name, 8))] * 3
    with RawConnection(broker.bootstrap) as conn:
        frames = [conn.encode(api_key, version, body) for api_key, version, body in asked]
        conn.send_bytes(b"".join(size_prefixed(f) for f in frames))  # all before any answer is read
        answers = [conn.read_frame() for _ in asked]
    bodies: dict[tuple[int, int], set] = {}
    for number, ((api_key, version, _), frame) in enumerate(zip(asked, answers), start=1):
        correlation_id, answer = _decoded(frame, api_key, version)
        assert correlation_id == number
        assert answer.error_code == ErrorCode.none if api_key == 18 else answer.topics[0].error_code == ErrorCode.none
        header = 4 + (1 if response_schema(api_key, version).__flexible__ and api_key != 18 else 0)
        bodies.setdefault((api_key, version), set()).add(frame[header:])
    assert all(len(kinds) == 1 for kinds in bodies.values()), {k: len(v) for k, v in bodies.items()}


def test_metadata_after_a_topic_change_is_not_the_kept_answer(broker, topic_name):
    """Metadata kept while the topic was unknown, then with 1 partition: after the topic is made and grows, the
    answer is the new one (its body differs, so it is written anew)."""
    from confluent_kafka.admin import NewPartitions

    def partitions(conn) -> tuple[ErrorCode, int]:
        answer = conn.request(3, 12, _metadata_request(topic_name, 12))
        return answer.topics[0].error_code, len(answer.topics[0].partitions)

    with RawConnection(broker.bootstrap) as conn:
        assert partitions(conn) == partitions(conn) == (ErrorCode.unknown_topic_or_partition, 0)
        admin = create_topic(broker.bootstrap, topic_name, 1)
        assert partitions(conn) == partitions(conn) == (ErrorCode.none, 1)
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(30)
        assert partitions(conn) == (ErrorCode.none, 3)


def test_unsupported_versions_and_malformed_frames_answer_as_before(broker):
    """ApiVersions of a version the broker lacks is answered in v0 (header v0) with UNSUPPORTED_VERSION, each with
    its correlation id; a malformed Metadata frame closes the connection (as Kafka); the broker serves on."""
    for correlation_id in (7, 8, 7):
        with RawConnection(broker.bootstrap) as conn:
            flexible_header = request_header(18, 99, correlation_id, b"review", True)
            conn.send_frame(flexible_header + b"\x07review\x0322\x00")
            got, answer = _decoded(conn.read_frame(), 18, 0)
            assert (got, answer.error_code) == (correlation_id, ErrorCode.unsupported_version)
            assert any(k.api_key == 18 for k in answer.api_keys)
    for _ in range(2):
        with RawConnection(broker.bootstrap) as conn:
            conn.send_frame(request_header(3, 12, 1, b"review", True) + struct.pack(">i", 1000))  # not a Metadata v12 body
            assert conn.is_closed_by_peer()
    with RawConnection(broker.bootstrap) as conn:
        assert conn.request(18, 3, API_VERSIONS).error_code == ErrorCode.none

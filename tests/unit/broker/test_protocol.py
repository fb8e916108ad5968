"""Responses built from dicts decode back to what the handler meant, in every version."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from freshet.broker.wire.protocol import decode_request, encode_response, response_schema
from freshet.format.errors import FrameError
from freshet.format.framing import read_request_header


def decode(api_key, version, frame):
    schema = response_schema(api_key, version)
    pos = 4 + 4 + (1 if schema.__flexible__ and api_key != 18 else 0)
    result = entity_reader(schema)(frame, pos)
    return result[0] if isinstance(result, tuple) else result.value


@pytest.mark.parametrize("version", range(3, 11))
@given(base_offset=st.integers(0, 2**62), error=st.sampled_from([0, 2, 3, 10, 45]),
       name=st.text(alphabet="abc.-_", min_size=1, max_size=20))
@settings(max_examples=20, deadline=None)
def test_produce_response_round_trip(version, base_offset, error, name):
    body = {"responses": [{"name": name, "partition_responses": [
        {"index": 3, "error_code": error, "base_offset": base_offset, "log_append_time": None,
         "log_start_offset": 0, "record_errors": [], "error_message": None}]}], "throttle_time": 0}
    frame = encode_response(0, version, 42, body)
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 42)
    decoded = decode(0, version, frame)
    part = decoded.responses[0].partition_responses[0]
    assert (decoded.responses[0].name, part.index, part.error_code, part.base_offset) == (name, 3, error, base_offset)


@pytest.mark.parametrize("version", range(4, 13))
@given(records=st.binary(max_size=300), hw=st.integers(0, 2**40))
@settings(max_examples=10, deadline=None)
def test_fetch_response_round_trip(version, records, hw):
    body = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": hw, "last_stable_offset": hw,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records}]}]}
    part = decode(1, version, encode_response(1, version, 1, body)).responses[0].partitions[0]
    assert part.high_watermark == hw and bytes(part.records or b"") == records


def test_api_versions_response_keeps_header_v0_and_omits_default_tags():
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 10}], "throttle_time": 0}
    frame = encode_response(18, 3, 5, body)
    # size, correlation id, error, compact array of 1, one entry, throttle, no tagged fields
    assert frame[4:] == struct.pack(">ih", 5, 0) + b"\x02" + struct.pack(">hhh", 0, 3, 10) + b"\x00" + \
        struct.pack(">i", 0) + b"\x00"


def test_garbage_body_is_a_frame_error():
    frame = struct.pack(">hhih", 3, 12, 1, -1) + b"\xff" * 9
    with pytest.raises(FrameError):
        decode_request(frame, read_request_header(frame))


def test_build_refuses_a_key_that_names_no_field_in_any_version():
    from freshet.broker.wire.protocol import build

    schema = response_schema(0, 10)  # ProduceResponse v10
    ok = build(schema, {"responses": [], "throttle_time": 0})
    assert ok.responses == ()
    with pytest.raises(ValueError, match="throttle_tme"):
        build(schema, {"responses": [], "throttle_tme": 0})
    # a field of another version is dropped, not refused: one handler serves every version
    build(response_schema(0, 3), {"responses": [], "throttle_time": 0})


def test_frame_check_bounds_every_size_by_the_frame():
    from freshet.broker.wire.frame_check import check
    from freshet.broker.wire.protocol import request_schema

    metadata_v1 = request_schema(3, 1)  # topics: array of names
    assert check(metadata_v1, b"\x00\x00\x00\x01\x00\x01t", 0) == 7
    with pytest.raises(FrameError, match="cannot fit"):
        check(metadata_v1, b"\x7f\xff\xff\xff", 0)  # two billion topics in four bytes


def test_a_key_no_version_has_is_an_error_under_checks_and_dropped_otherwise(monkeypatch):
    from freshet.broker.wire.protocol import CHECKS_VARIABLE, build, response_schema

    schema = response_schema(3, 13)  # Metadata v13 has no cluster_authorized_operations (v8-10 do)
    body = {"throttle_time": 0, "error_code": 0, "brokers": [], "cluster_id": "c", "controller_id": 0,
            "topics": [], "cluster_authorized_operations": 0}
    monkeypatch.setenv(CHECKS_VARIABLE, "1")
    assert build(schema, body).cluster_id == "c"  # a field of another version: dropped
    with pytest.raises(ValueError, match="no field tpoics"):
        build(schema, {**body, "tpoics": []})
    monkeypatch.delenv(CHECKS_VARIABLE)
    assert build(schema, {**body, "tpoics": []}).cluster_id == "c"  # without checks nothing is imported for it


def _written_by_kio(api_key, version, correlation_id, body):
    """The frame as kio writes it, without the kept bodies of encode_response."""
    import io

    from freshet.broker.wire import protocol

    schema = response_schema(api_key, version)
    buf = io.BytesIO()
    protocol._writer(schema)(buf, protocol.build(schema, body))
    header = protocol.response_header(api_key, correlation_id, schema.__flexible__)
    return struct.pack(">i", len(header) + len(buf.getvalue())) + header + buf.getvalue()


@given(answers=st.lists(st.tuples(st.sampled_from([0, 15, 16, 22, 25, 27]), st.integers(0, 3),
                                  st.integers(-2**31, 2**31 - 1), st.sampled_from(["t", "u", "tt"]),
                                  st.lists(st.integers(0, 5), max_size=4)), min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_an_answer_given_again_is_the_same_bytes_and_a_changed_one_is_new(answers):
    # the same answer body again (heartbeats, AddPartitionsToTxn, ApiVersions, Metadata) comes from the bodies
    # encode_response keeps; each frame must be what kio writes for that body, with the request's correlation id
    for error, throttle, correlation_id, topic, partitions in answers:
        heartbeat = {"throttle_time": throttle, "error_code": error}
        assert encode_response(12, 3, correlation_id, heartbeat) == _written_by_kio(12, 3, correlation_id, heartbeat)
        added = {"throttle_time": throttle, "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": [{"partition_index": p, "partition_error_code": error}
                                                     for p in partitions]}]}
        for version in (0, 3):
            assert encode_response(24, version, correlation_id, added) == _written_by_kio(24, version, correlation_id,
                                                                                          added)


def test_answers_alike_but_for_their_shape_are_not_taken_for_each_other():
    # a topic with no partitions and one with an empty name must not share a kept body with each other
    first = {"throttle_time": 0, "results_by_topic_v3_and_below": [{"name": "", "results_by_partition": []}]}
    second = {"throttle_time": 0, "results_by_topic_v3_and_below": []}
    assert encode_response(24, 3, 1, first) == _written_by_kio(24, 3, 1, first)
    assert encode_response(24, 3, 1, second) == _written_by_kio(24, 3, 1, second)
    assert encode_response(24, 3, 1, first) != encode_response(24, 3, 1, second)


def test_an_answer_given_again_is_not_written_again(monkeypatch):
    from freshet.broker.wire import protocol

    built = []
    build = protocol.build
    monkeypatch.setattr(protocol, "build", lambda schema, data: built.append(schema) or build(schema, data))
    body = {"throttle_time": 0, "error_code": 27}  # REBALANCE_IN_PROGRESS, as to every member of a rebalance
    frames = [encode_response(12, 4, correlation_id, body) for correlation_id in (7, 8, 9)]
    assert len(built) <= 1  # kio writes it once (none if an earlier test wrote it)
    assert [struct.unpack_from(">i", f, 4)[0] for f in frames] == [7, 8, 9]
    assert len({f[8:] for f in frames}) == 1


def test_floats_equal_but_written_apart_are_not_taken_for_each_other():
    def quotas(value):
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "alice"}],
             "values": [{"key": "producer_byte_rate", "value": value}]}]}

    for value in (0.0, -0.0, 0.0):
        assert encode_response(48, 1, 1, quotas(value)) == _written_by_kio(48, 1, 1, quotas(value))

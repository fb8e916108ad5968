"""The fetch response written as buffers is byte for byte what kio writes, in every version served."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.broker.wire.fetch_encoding import encode_fetch_body
from freshet.broker.wire.protocol import encode_response, frame_parts

aborted = st.lists(st.fixed_dictionaries({"producer_id": st.integers(0, 2**62), "first_offset": st.integers(0, 2**62)}),
                   max_size=3)
partition = st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 1, 3, 6]),
    "high_watermark": st.integers(-1, 2**62),
    "last_stable_offset": st.integers(-1, 2**62),
    "log_start_offset": st.integers(-1, 2**62),
    "aborted_transactions": st.none() | aborted,
    "preferred_read_replica": st.just(-1),
    "records": st.binary(max_size=200) | st.binary(max_size=200).map(memoryview),
})
topic = st.fixed_dictionaries({"topic": st.text(min_size=1, max_size=150), "topic_id": st.uuids(),
                               "partitions": st.lists(partition, max_size=4)})
body = st.fixed_dictionaries({"throttle_time": st.integers(0, 10_000), "error_code": st.sampled_from([0, 70]),
                              "session_id": st.just(0), "responses": st.lists(topic, max_size=3)})


@pytest.mark.parametrize("version", range(4, 19))
@given(body=body, correlation_id=st.integers(-2**31, 2**31 - 1))
@settings(max_examples=40, deadline=None)
def test_same_bytes_as_kio(version, body, correlation_id):
    parts = frame_parts(1, version, correlation_id, encode_fetch_body(version, body))
    written = b"".join(bytes(p) for p in parts)
    plain = {**body, "responses": [
        {**t, "partitions": [{**p, "records": bytes(p["records"])} for p in t["partitions"]]} for t in body["responses"]]}
    assert written == encode_response(1, version, correlation_id, plain)


def test_record_sets_are_not_copied():
    records = memoryview(b"x" * 1000)
    body = {"throttle_time": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 1, "records": records}]}]}
    assert any(part is records for part in encode_fetch_body(11, body))


def test_versions_outside_the_range_are_refused():
    with pytest.raises(ValueError):
        encode_fetch_body(19, {"responses": []})

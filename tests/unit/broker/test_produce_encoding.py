"""The produce response packed with struct is byte for byte what kio writes, in every version served."""

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.broker.server import encode
from freshet.broker.wire.produce_encoding import encode_produce_body
from freshet.broker.wire.protocol import encode_response, frame_parts

record_error = st.fixed_dictionaries({"batch_index": st.integers(0, 2**31 - 1),
                                      "batch_index_error_message": st.none() | st.text(max_size=30)})
partition = st.fixed_dictionaries({
    "index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 2, 3, 10, 47, 87]),
    "base_offset": st.integers(-1, 2**62),
    "log_append_time": st.none() | st.datetimes(min_value=datetime.datetime(2000, 1, 1), max_value=datetime.datetime(
        2100, 1, 1), timezones=st.just(datetime.timezone.utc)).map(lambda d: d.replace(microsecond=d.microsecond // 1000
                                                                                      * 1000)),
    "log_start_offset": st.integers(-1, 2**62),
    "record_errors": st.lists(record_error, max_size=2),
    "error_message": st.none() | st.text(max_size=40),
})
topic = st.fixed_dictionaries({"name": st.text(min_size=1, max_size=150), "topic_id": st.uuids(),
                               "partition_responses": st.lists(partition, max_size=4)})
body = st.fixed_dictionaries({"throttle_time": st.integers(0, 10_000), "responses": st.lists(topic, max_size=3)})


@pytest.mark.parametrize("version", range(3, 14))
@given(body=body, correlation_id=st.integers(-2**31, 2**31 - 1))
@settings(max_examples=40, deadline=None)
def test_same_bytes_as_kio(version, body, correlation_id):
    written = b"".join(frame_parts(0, version, correlation_id, [encode_produce_body(version, body)]))
    assert written == encode_response(0, version, correlation_id, body)


def test_the_broker_answers_produce_through_it():
    from freshet.format.framing import RequestHeader

    body = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": None, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}]}
    header = RequestHeader(0, 9, 7, "c", 0)
    assert bytes(encode(header, body)) == encode_response(0, 9, 7, body)

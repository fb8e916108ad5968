"""REST Proxy request shapes: what v3 and v2 accept, and the errors (status and error_code) they give."""

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.ingest.rest_proxy import (
    ShapeError,
    V3Reports,
    split_concatenated,
    v2_failure,
    v2_format,
    v2_records,
    v3_record,
)


def test_v3_types_headers_partition_and_timestamp():
    r = v3_record({"partition_id": 1, "key": {"type": "STRING", "data": "k"},
                   "value": {"type": "BINARY", "data": "aGk="}, "headers": [{"name": "h", "value": "eA=="},
                                                                           {"name": "n", "value": None}],
                   "timestamp": "2024-01-02T03:04:05.006Z"}, partitions=2)
    assert (r.key, r.value, r.partition, r.headers, r.timestamp_ms) == (b"k", b"hi", 1, [("h", b"x"), ("n", None)],
                                                                       1704164645006)
    r = v3_record({"value": {"data": {"a": [1, 2]}}}, partitions=1)  # type defaults to JSON
    assert (r.key, r.value, r.partition, r.value_type) == (None, b'{"a":[1,2]}', -1, "JSON")
    assert v3_record({}, 1).value is None  # no value: a tombstone


@pytest.mark.parametrize("obj", [{"key": {"type": "JSON", "data": None}, "value": {"type": "JSON", "data": None}},
                                 {"key": {"data": None}, "value": {"data": None}}])
def test_v3_json_null_is_a_null_key_or_value_not_the_text_null(obj):
    r = v3_record(obj, 1)  # the REST Proxy writes a tombstone, not the 4 bytes "null"
    assert (r.key, r.value) == (None, None)
    line = orjson.loads(V3Reports("c", "t").written(r, 0, 1, 0))
    assert "key" not in line and "value" not in line


@pytest.mark.parametrize("obj", [{"value": {"data": {"a": 1}}}, {"key": {"type": "STRING", "data": "k\u00e9"}},
                                 {"key": {"type": "BINARY", "data": "aGk="}, "value": {"type": "STRING", "data": ""}},
                                 {}])
def test_v3_report_lines_are_the_rest_proxys_json(obj):
    record = v3_record(obj, 1)
    line = V3Reports('c"1\\', "t.x-1").written(record, 0, 42, 1704164645006)
    expected = {"error_code": 200, "cluster_id": 'c"1\\', "topic_name": "t.x-1", "partition_id": 0, "offset": 42,
                "timestamp": "2024-01-02T03:04:05.006Z"}
    for part in ("key", "value"):
        if getattr(record, part) is not None:
            expected[part] = {"type": getattr(record, f"{part}_type"), "size": len(getattr(record, part))}
    assert orjson.loads(line) == expected


@pytest.mark.parametrize("obj, status, words", [
    ([1], 400, "JSON object"),
    ({"partition_id": 5, "value": {"data": 1}}, 404, "partition 5"),
    ({"partition_id": "0"}, 400, "integer"),
    ({"value": {"type": "AVRO", "data": {}}}, 400, "schema registry"),
    ({"value": {"schema_id": 3, "data": {}}}, 400, "schema registry"),
    ({"value": {"type": "XML", "data": "x"}}, 400, "BINARY, JSON, STRING"),
    ({"value": {"type": "BINARY", "data": "not base64!"}}, 400, "base64"),
    ({"value": {"type": "STRING", "data": 5}}, 400, "must be a string"),
    ({"value": {"type": "JSON"}}, 400, "no data"),
    ({"value": {"data": 1}, "timestamp": "yesterday"}, 400, "ISO-8601"),
    ({"value": {"data": 1}, "headers": [{"value": "eA=="}]}, 400, "header"),
])
def test_v3_refusals(obj, status, words):
    with pytest.raises(ShapeError) as info:
        v3_record(obj, partitions=2)
    assert info.value.status == status and words in info.value.message


def test_concatenated_json_split_and_incomplete_versus_malformed():
    values, rest, error = split_concatenated('{"a":1}\n{"b":2} {"c"')
    assert values == [{"a": 1}, {"b": 2}] and rest == '{"c"' and error.incomplete
    values, rest, error = split_concatenated('{"a":1}]{"b":2}')
    assert values == [{"a": 1}] and not error.incomplete


def test_v2_formats_and_records():
    assert v2_format("application/vnd.kafka.json.v2+json") == "json"
    assert v2_format("application/vnd.kafka.binary.v2+json; charset=utf-8") == "binary"
    assert v2_format("application/json") == "binary"
    for ct in ("application/vnd.kafka.avro.v2+json", "text/plain", "application/vnd.kafka.v2+json",
               "application/vnd.kafka+json; charset=utf-8"):
        with pytest.raises(ShapeError) as info:
            v2_format(ct)
        assert info.value.status == 415 and info.value.body()["error_code"] == 415
    with pytest.raises(ShapeError) as info:  # produce needs an embedded format (REST Proxy: 415)
        v2_format("application/vnd.kafka.v2+json")
    assert "application/vnd.kafka.json.v2+json" in info.value.message
    rs = v2_records({"records": [{"key": "k", "value": {"a": 1}, "partition": 1}, {"value": None}]}, "json", 2)
    assert [(r.key, r.value, r.partition) for r in rs] == [(b'"k"', b'{"a":1}', 1), (None, None, -1)]
    rs = v2_records({"records": [{"value": "aGk="}]}, "binary", 1, path_partition=0)
    assert (rs[0].value, rs[0].partition) == (b"hi", 0)
    for body, code in (({"records": 1}, 42201), ({"records": [{"value": "!!"}]}, 42205),
                       ({"records": [{"partition": 9}]}, 40402)):
        with pytest.raises(ShapeError) as info:
            v2_records(body, "binary", 1)
        assert info.value.code == code


@pytest.mark.parametrize("status, code", [(413, 1), (400, 1), (404, 1), (500, 1), (429, 2), (503, 2)])
def test_v2_per_record_error_codes_are_the_rest_proxys(status, code):
    # REST Proxy v2: error_code 1 = non-retriable (a record too large), 2 = retriable (retrying may succeed)
    entry = v2_failure(ShapeError(status, "why"))
    assert entry == {"partition": None, "offset": None, "error_code": code, "error": "why"}


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(alphabet="{}[]\" \n\\aé:,", max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(alphabet="{}\"a é", max_size=4), json_values, max_size=3), max_size=6),
       st.sampled_from(["", " ", "\n", "\r\n  "]))
def test_concatenated_objects_come_back_as_sent_whatever_their_strings_hold(objects, gap):
    body = gap.join(orjson.dumps(o).decode() for o in objects).encode()
    values, rest, error = split_concatenated(body)
    assert (values, error) == (objects, None)


@given(st.integers(-10**12, 4_102_444_800_000))
def test_report_timestamps_are_rfc3339_utc_milliseconds(ms):
    from datetime import UTC, datetime

    from freshet.ingest.rest_proxy import iso

    assert iso(ms) == datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    assert datetime.fromisoformat(iso(ms)) == datetime.fromtimestamp(ms // 1000, UTC).replace(
        microsecond=(ms % 1000) * 1000)

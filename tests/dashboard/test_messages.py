"""The console's records against a live broker: browsing from every start and both ways, filters evaluated in the
server within a scan budget, transaction states, the JSON-lines download, producing, and partition sizes."""

import base64
import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from fastapi.testclient import TestClient

from freshet.client import consumer_config
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.topics import create_topic

TOPIC = "console-records"
BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def client(broker):
    """120 records over two partitions (n = 0..119 to partition n % 2, timestamp BASE + n seconds), JSON values,
    one header each, every tenth record with an "odd" header; and one binary record at the end of partition 1."""
    create_topic(broker.bootstrap, TOPIC, 2, {"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(120):
        headers = [("source", b"gen")] + ([("odd", b"yes")] if n % 10 == 0 else [])
        value = json.dumps({"n": n, "user": {"id": f"u{n % 7}"}, "tags": ["a", "b"] if n % 3 else ["c"]})
        producer.produce(TOPIC, value.encode(), f"k{n}".encode(), partition=n % 2, timestamp=BASE_MS + n * 1000,
                         headers=headers)
    producer.produce(TOPIC, b"\xff\x00\xfe", b"bin", partition=1, timestamp=BASE_MS + 200_000)
    producer.flush(10)
    collector = Collector(broker.bootstrap)
    collector.collect()
    return TestClient(create_app(collector))


def get(client, query: str, status: int = 200) -> dict:
    answer = client.get(f"/api/topics/{TOPIC}/messages?{query}")
    assert answer.status_code == status, answer.text
    return answer.json()


def ns(answer: dict) -> list:
    return [json.loads(r["value"]["text"])["n"] for r in answer["records"]]


def test_newest_first_across_partitions_and_one_partition(client):
    newest = get(client, "limit=5&partition=0")
    assert newest["direction"] == "backward" and ns(newest) == [118, 116, 114, 112, 110]
    assert [r["offset"] for r in newest["records"]] == [59, 58, 57, 56, 55]
    every = get(client, "limit=4")  # all partitions, newest by timestamp first
    assert every["records"][0]["key"]["text"] == "bin" and ns({"records": every["records"][1:]}) == [119, 118, 117]


def test_oldest_first_from_an_offset_and_from_a_time(client):
    assert ns(get(client, "start=oldest&partition=1&limit=3")) == [1, 3, 5]
    assert ns(get(client, "offset=10&partition=0&limit=2")) == [20, 22]  # offset= alone starts there, forward
    assert ns(get(client, "offset=10&partition=0&limit=2&direction=newest-first")) == [20, 18]
    at = BASE_MS + 50_500  # between n=50 and n=51
    assert ns(get(client, f"timestamp={at}&limit=4")) == [51, 52, 53, 54]
    assert ns(get(client, f"timestamp={at}&limit=3&direction=backward")) == [50, 49, 48]


def test_a_record_shows_its_timestamp_type_key_headers_and_json(client):
    r = get(client, "offset=0&partition=0&limit=1")["records"][0]
    assert (r["partition"], r["offset"], r["timestamp"], r["timestamp_type"]) == (0, 0, BASE_MS, "create")
    assert r["key"] == {"size": 2, "text": "k0"} and r["transaction"] is None
    assert json.loads(r["value"]["json"]) == {"n": 0, "user": {"id": "u0"}, "tags": ["c"]}
    assert r["value"]["json"].startswith('{\n  "n": 0')  # pretty
    assert r["headers"] == [{"name": "source", "value": {"size": 3, "text": "gen"}},
                            {"name": "odd", "value": {"size": 3, "text": "yes"}}]
    binary = get(client, "partition=1&limit=1")["records"][0]
    assert binary["value"] == {"size": 3, "base64": base64.b64encode(b"\xff\x00\xfe").decode()}


def test_filters_run_in_the_server(client):
    by_key = get(client, "key=k77&start=oldest")
    assert ns(by_key) == [77] and by_key["progress"]["scanned"] == 121 and by_key["progress"]["total"] == 121
    assert by_key["progress"]["line"] == "scanned 121 of 121, 1 match"
    assert ns(get(client, "key=k")) == []  # exact, not a prefix
    assert ns(get(client, 'value="n": 11&start=oldest')) == [11, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119]
    assert ns(get(client, "header=odd=yes&start=oldest")) == list(range(0, 120, 10))
    assert ns(get(client, "header=odd&start=oldest&limit=2")) == [0, 10]
    assert sorted(ns(get(client, 'json_path=$.user.id == "u3"&start=oldest'))) == list(range(3, 120, 7))
    assert ns(get(client, "json_path=$.n >= 117&start=oldest")) == [117, 118, 119]
    assert sorted(ns(get(client, "json_path=$.tags[?(@ == 'c')]&start=oldest&partition=0&limit=500"))) == \
        list(range(0, 120, 6))
    both = get(client, 'json_path=$.user.id == "u3"&header=odd=yes')
    assert ns(both) == [80, 10]  # n % 7 == 3 and n % 10 == 0, newest first


def test_a_scan_stops_at_its_budget_and_says_so(client):
    answer = get(client, "key=k0&max_scan=30&partition=0")  # k0 is partition 0's first record: out of reach
    assert answer["records"] == []
    assert answer["progress"] == {"scanned": 30, "total": 60, "matches": 0, "stopped": "budget",
                                  "line": "scanned 30 of 60, 0 matches (scan budget spent)"}
    limited = get(client, "start=oldest&partition=0&limit=7")
    assert len(limited["records"]) == 7 and limited["progress"]["stopped"] == "limit"


def test_download_as_json_lines(client):
    answer = client.get(f"/api/topics/{TOPIC}/messages?format=jsonl&start=oldest&partition=0&limit=100000")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-ndjson"
    assert f'filename="{TOPIC}.jsonl"' in answer.headers["content-disposition"]
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert [r["offset"] for r in lines] == list(range(60))
    assert answer.headers["x-scan-progress"] == "scanned 60 of 60, 60 matches"


@pytest.mark.parametrize("query, status, message", [
    ("partition=2", 400, "partition 2 does not exist: topic 'console-records' has partitions 0..1"),
    ("partition=x", 400, "partition must be a number or 'all'"),
    ("offset=500&partition=0", 400, "offset 500 is out of range for partition 0 (its records are at offsets 0..59"),
    ("start=offset", 400, "start=offset needs offset=N"),
    ("start=tomorrow", 400, "start must be one of newest, oldest, offset, timestamp"),
    ("start=oldest&direction=backward", 400, "nothing lies before the oldest record"),
    ("direction=sideways", 400, "direction must be one of"),
    ("json_path=$.[[", 400, "bad JSON path '$.[['"),
    ("json_path=$.n == u1", 400, "'u1' is not a JSON value (strings take double quotes)"),
    ("json_path=$.tags[?(@ =~ '(')]", 400, "bad JSON path \"$.tags[?(@ =~ '(')]\": '(' is not a regular expression"),
    ("limit=5000", 400, "limit is at most 1000 on the page"),
    ("limit=0", 422, None),
])
def test_bad_requests_are_refused_with_a_reason(client, query, status, message):
    answer = get(client, query, status)
    if message:
        assert message in answer["detail"]


def test_an_unknown_topic_is_404(client):
    assert client.get("/api/topics/no-such-topic/messages").status_code == 404
    assert client.post("/api/topics/no-such-topic/messages", json={"value": "x"}).status_code == 404


def test_aborted_and_open_transactions_are_marked(broker, client):
    topic = "console-txn"
    create_topic(broker.bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(10)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "console-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"aborted-1", partition=0)
    txn.produce(topic, b"aborted-2", partition=0)
    txn.flush(10)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"committed", partition=0)
    txn.flush(10)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    txn.flush(10)
    try:
        answer = client.get(f"/api/topics/{topic}/messages?start=oldest").json()
        states = {r["value"]["text"]: r["transaction"] for r in answer["records"]}
        assert states == {"before": None, "aborted-1": "aborted", "aborted-2": "aborted", "committed": None,
                          "open": "open"}
        assert client.get(f"/api/topics/{topic}/messages?value=aborted").json()["progress"]["matches"] == 2
    finally:
        txn.commit_transaction(30)
    after = client.get(f"/api/topics/{topic}/messages?start=oldest&value=open").json()["records"]
    assert [r["transaction"] for r in after] == [None]


def test_produce_answers_where_the_record_landed(broker, client):
    topic = "console-produce"
    create_topic(broker.bootstrap, topic, 3)
    written = client.post(f"/api/topics/{topic}/messages",
                          json={"partition": 2, "key": "order-1", "value": '{"total": 12}', "headers": {"trace": "t1"}})
    assert written.status_code == 200, written.text
    assert written.json() == {"topic": topic, "partition": 2, "offset": 0}
    again = client.post(f"/api/topics/{topic}/messages", json={"partition": 2, "value": "second"}).json()
    assert again["offset"] == 1
    binary = client.post(f"/api/topics/{topic}/messages", json={
        "key": base64.b64encode(b"\x01").decode(), "value": base64.b64encode(b"\xff\xfe").decode(),
        "encoding": "base64"}).json()
    consumer = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
    try:
        consumer.assign([TopicPartition(topic, 2, 0), TopicPartition(topic, binary["partition"], binary["offset"])])
        seen = {}
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            for m in consumer.consume(10, 0.5):
                if m.error() is None:
                    seen[(m.partition(), m.offset())] = m
    finally:
        consumer.close()
    first = seen[(2, 0)]
    assert (first.key(), first.value(), first.headers()) == (b"order-1", b'{"total": 12}', [("trace", b"t1")])
    assert seen[(binary["partition"], binary["offset"])].value() == b"\xff\xfe"
    assert seen[(binary["partition"], binary["offset"])].key() == b"\x01"


def test_produce_refusals(broker, client):
    topic = "console-produce-small"
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": "2000"})
    big = client.post(f"/api/topics/{topic}/messages", json={"value": "x" * 5000})
    assert big.status_code == 413
    assert big.json()["detail"] == "MSG_SIZE_TOO_LARGE: Broker: Message size too large"  # the broker's answer
    wrong = client.post(f"/api/topics/{topic}/messages", json={"partition": 1, "value": "x"})
    assert wrong.status_code == 400 and "has partitions 0..0" in wrong.json()["detail"]
    bad = client.post(f"/api/topics/{topic}/messages", json={"value": "not base64!", "encoding": "base64"})
    assert bad.status_code == 400 and bad.json()["detail"] == "value is not base64"
    nothing = client.get(f"/api/topics/{topic}/messages").json()
    assert nothing["records"] == []  # nothing refused was written


def test_topic_sizes_without_broker_metrics(broker):
    """The size column comes from DescribeLogDirs through the admin client: no --broker-metrics needed."""
    import glob
    import os

    topic = "console-sizes"
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce(topic, b"y" * 300, partition=0)
    producer.flush(10)
    collector = Collector(broker.bootstrap)  # no broker_metrics
    collector.collect()
    on_disk = [sum(os.path.getsize(f) for f in glob.glob(os.path.join(broker.data_dir, "topics", topic, str(p),
                                                                      "*.log"))) for p in (0, 1)]
    assert on_disk[0] > 12_000
    shown = TestClient(create_app(collector)).get("/api/overview").json()["topics"][topic]
    assert shown["size_bytes"] == sum(on_disk)
    page = TestClient(create_app(collector)).get(f"/api/topics/{topic}").json()
    assert [p["size_bytes"] for p in page["partitions"]] == on_disk
    assert all(p["segments"] is None for p in page["partitions"])  # segment counts still need --broker-metrics


class Record:
    """What Filters.select reads of a confluent-kafka Message."""

    def __init__(self, value: bytes, key: bytes | None = None, headers=None):
        self._value, self._key, self._headers = value, key, headers

    def value(self):
        return self._value

    def key(self):
        return self._key

    def headers(self):
        return self._headers


def test_plain_json_paths_are_looked_up_as_jsonpath_ng_finds_them():
    from jsonpath_ng.ext import parse

    from freshet.dashboard.browse import Filters

    docs = [{"a": {"b": [1, {"c": 2}]}}, {"a": [1]}, [{"a": 1}], {"a": {"b": "x"}}, 5, {"a": None}, {"b": 1}]
    for path in ("$.a.b", "$.a.b[1].c", "$.a[0]", "a.b", "$[0].a", "$.a", "$.a.b[5]"):
        f = Filters.parse(None, None, None, path)
        assert f.steps is not None, path  # looked up directly, not through jsonpath-ng
        for doc in docs:
            assert f._find(doc) == [x.value for x in parse(path).find(doc)], (path, doc)
    assert Filters.parse(None, None, None, "$.items[?(@.p > 1)]").steps is None  # jsonpath-ng evaluates filters
    big = Filters.parse(None, None, None, "$.id == 123456789012345678901234567890")  # beyond orjson's 64 bits
    assert len(big.select([Record(b'{"id": 123456789012345678901234567890}'), Record(b'{"id": 1}')])) == 1


def test_a_streamed_search_reports_progress_then_answers(client):
    answer = client.get(f"/api/topics/{TOPIC}/messages?format=stream&start=oldest&key=k119&partition=1")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-ndjson"
    events = [json.loads(line) for line in answer.text.splitlines()]
    progress = [e["progress"] for e in events[:-1] if "progress" in e]
    assert progress and all(p["stopped"] is None and p["line"].endswith(" …") for p in progress)
    previews = [r for e in events[:-1] for r in e.get("matches", [])]  # shown as found, before the answer
    assert [(r["partition"], r["offset"], r["key"]["text"]) for r in previews] == [(1, 59, "k119")]
    assert [p["scanned"] for p in progress] == sorted(p["scanned"] for p in progress)
    done = events[-1]["done"]
    assert ns(done) == [119] and done["progress"]["line"] == "scanned 61 of 61, 1 match"
    bad = client.get(f"/api/topics/{TOPIC}/messages?format=stream&offset=900&partition=1")
    assert [json.loads(line) for line in bad.text.splitlines()] == [
        {"error": "offset 900 is out of range for partition 1 (its records are at offsets 0..60; 61 is the next one)"}]


def test_topic_sizes_on_a_secured_cluster(tmp_path, monkeypatch):
    """DescribeLogDirs goes through kafka-python with the dashboard's own SASL settings (FRESHET_* variables, in
    librdkafka's names, translated to kafka-python's); a user the cluster will not answer sees no sizes, not wrong
    ones, and everything else still works."""
    from freshet.local import BrokerProcess

    from .secured import add_users

    data = tmp_path / "data"
    add_users(data, "admin", "nobody")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"], extra_args=["--super-user", "User:admin"]) as b:
        monkeypatch.setenv("FRESHET_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
        monkeypatch.setenv("FRESHET_SASL_MECHANISM", "PLAIN")
        monkeypatch.setenv("FRESHET_SASL_USERNAME", "admin")
        monkeypatch.setenv("FRESHET_SASL_PASSWORD", "admin-pw")
        create_topic(b.bootstrap, "secure-sizes", 1)
        producer = Producer({"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-pw"})
        for _ in range(20):
            producer.produce("secure-sizes", b"z" * 100)
        producer.flush(10)
        admin_view = Collector(b.bootstrap).collect()
        assert admin_view.topics["secure-sizes"]["size_bytes"] > 2000
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                           ResourcePatternType, ResourceType)

        from freshet.client import admin_config

        grant = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:nobody", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)  # its topics, not the cluster
        admin = AdminClient(admin_config(b.bootstrap))
        for f in admin.create_acls([grant]).values():
            f.result(10)
        monkeypatch.setenv("FRESHET_SASL_USERNAME", "nobody")
        monkeypatch.setenv("FRESHET_SASL_PASSWORD", "nobody-pw")
        nobody_view = Collector(b.bootstrap).collect()
        shown = nobody_view.topics["secure-sizes"]
        assert shown["messages"] == 20 and shown["size_bytes"] is None and nobody_view.error is None


def test_one_partition_keeps_offset_order_whatever_its_timestamps(broker, client):
    topic = "console-clock-skew"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(5):  # producers' clocks disagree: timestamps go down as offsets go up
        producer.produce(topic, b"%d" % n, timestamp=BASE_MS - n * 1000)
    producer.flush(10)
    newest = client.get(f"/api/topics/{topic}/messages?partition=0").json()["records"]
    assert [r["offset"] for r in newest] == [4, 3, 2, 1, 0]
    oldest = client.get(f"/api/topics/{topic}/messages?partition=0&start=oldest&limit=3").json()["records"]
    assert [r["offset"] for r in oldest] == [0, 1, 2]


BOTH_READERS_QUERIES = [
    "key=k77&start=oldest", 'value="n": 11&start=oldest', "header=odd=yes&start=oldest&limit=500",
    'json_path=$.user.id == "u3"&start=oldest&limit=500', "json_path=$.n >= 117", "limit=500",
    'json_path=$.user.id == "u3"&header=odd=yes', "offset=10&partition=0&limit=5&direction=newest-first",
    f"timestamp={BASE_MS + 50_500}&limit=4", "key=k0&max_scan=30&partition=0",
]


def test_the_columnar_reader_and_librdkafka_answer_alike(client, monkeypatch):
    """The search reads through the columnar reader where it serves (plaintext, pyarrow), its partitions shared
    by two readers: every answer, record by record, is the one a single reader and the librdkafka path give."""
    from freshet.dashboard import scan_columns

    assert scan_columns.reader_options(client.app.state.collector.bootstrap) is not None
    fast = [get(client, q) for q in BOTH_READERS_QUERIES]
    monkeypatch.setattr(scan_columns, "READERS", 1)  # one reader for both partitions: the same answers
    assert [get(client, q) for q in BOTH_READERS_QUERIES] == fast
    monkeypatch.setattr(scan_columns, "reader_options", lambda bootstrap: None)
    assert [get(client, q) for q in BOTH_READERS_QUERIES] == fast
    assert all(answer["records"] for answer in fast[:-1])


def test_a_reader_that_fails_fails_the_scan_and_leaves_no_thread_behind():
    import threading

    from freshet.dashboard import scan_columns
    from freshet.local import free_port

    before = {t for t in threading.enumerate() if t.name == "console-search-read"}
    nobody = f"127.0.0.1:{free_port()}"  # no broker listens there
    try:
        scan_columns.read_windows(nobody, {"socket.timeout.ms": 2000}, "t", {0: (0, 10), 1: (0, 10)},
                                  lambda p, batch: None, None, RuntimeError)
    except (scan_columns.ReadFailed, OSError) as exc:
        assert str(exc)
    else:
        raise AssertionError("a read from no broker succeeded")
    assert {t for t in threading.enumerate() if t.name == "console-search-read"} == before


def test_a_json_path_string_written_with_escapes_still_matches(broker, client):
    """The fast path keeps values holding the string as JSON writes it, or a backslash: an escaped spelling of
    the same string is parsed and matches."""
    create_topic(broker.bootstrap, "console-escapes", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in (rb'{"user": "pl\u0061nted"}', b'{"user": "planted"}', b'{"user": "plant"}',
                  b'{"user": "\xc3\xa9t\xc3\xa9"}', rb'{"user": "\u00e9t\u00e9"}'):
        producer.produce("console-escapes", value)
    producer.flush(10)
    found = client.get('/api/topics/console-escapes/messages?start=oldest&json_path=$.user == "planted"').json()
    assert [r["offset"] for r in found["records"]] == [0, 1]
    found = client.get('/api/topics/console-escapes/messages?start=oldest&json_path=$.user == "été"').json()
    assert [r["offset"] for r in found["records"]] == [3, 4]


def pages(client, query: str) -> list[list[int]]:
    """Every page of ``query``, following each answer's ``next``."""
    out, cursor = [], None
    while True:
        answer = get(client, query + (f"&cursor={cursor}" if cursor else ""))
        out.append([json.loads(r["value"]["text"])["n"] for r in answer["records"] if "text" in r["value"]])
        cursor = answer["next"]
        if cursor is None:
            return out


def test_paging_on_from_where_a_page_stopped_both_ways(client):
    """A page's ``next`` continues the same search: no record twice, none left out, forward and backward, in one
    partition or across both (records read but beyond the page's limit come on the next page)."""
    forward = pages(client, "start=oldest&partition=0&limit=25")
    assert [len(p) for p in forward] == [25, 25, 10] and sum(forward, []) == list(range(0, 120, 2))
    backward = pages(client, "partition=1&limit=25")  # its newest record is the binary one (not counted here)
    assert sum(backward, []) == list(range(119, 0, -2)) and [len(p) for p in backward] == [24, 25, 11]
    both = pages(client, "start=oldest&limit=7&direction=forward")
    assert sum(both, []) == list(range(120)) and all(len(p) == 7 for p in both[:-2])
    matching = pages(client, 'json_path=$.user.id == "u3"&limit=4')  # newest first, filtered
    assert sum(matching, []) == list(range(115, 0, -7))[:len(sum(matching, []))] == list(range(115, 0, -7))
    budgeted = pages(client, "key=k0&max_scan=50&partition=0")  # the budget ends a page, the next goes on
    assert sum(budgeted, []) == [0] and len(budgeted) == 2
    from_a_time = get(client, f"timestamp={BASE_MS + 50_500}&limit=2&direction=backward")
    assert ns(from_a_time) == [50, 49]
    assert ns(get(client, f"cursor={from_a_time['next']}&limit=2&direction=backward")) == [48, 47]


@pytest.mark.parametrize("cursor, message", [
    ("abc", "cursor must be PARTITION:OFFSET"), ("5:1", "names partition 5"), ("0:-1", "an offset below 0")])
def test_a_bad_cursor_is_refused(client, cursor, message):
    assert message in get(client, f"cursor={cursor}", 400)["detail"]


def test_the_buffer_search_agrees_with_arrows_kernel():
    """``containing`` (memmem over an Arrow array's data buffer) finds what Arrow's match_substring finds: nulls
    and empty values, a needle across two values (neither holds it), slices, and a common needle (past its
    ``most`` it hands over to the kernel)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from freshet.dashboard.scan_columns import containing

    values = [b'{"u": "x%d"}' % n for n in range(3000)] + [None, b"", b"ab", b"cd", b'a\\u0070', b"abcd"]
    array = pa.array(values, pa.binary())
    for part in (array, array.slice(2990), array.slice(3002, 2)):
        for needle in (b'"x29', b"bc", b"\\", b'"u"', b"x2999", b"zz"):
            expected = pc.fill_null(pc.match_substring(part, needle.decode()), False).to_pylist()
            assert containing(part, needle, most=100).to_pylist() == expected, (needle, len(part))
    assert sum(containing(array, b"bc").to_pylist()) == 1  # "abcd" only, not "ab" + "cd"


def test_a_json_path_needing_a_string_skips_only_values_that_cannot_match():
    """``required``: the string a path needs (its ``== "s"``, or a filter's ``@.f == 's'``) spares parsing the
    values without it; values that hold it escaped still match, and paths that need no string (or, not,
    unions) get none."""
    from freshet.dashboard.browse import Filters

    class Record:
        def __init__(self, value):
            self._value = value

        def value(self):
            return self._value

    docs = [b'{"items": [{"sku": "planted"}]}', rb'{"items": [{"sku": "pl\u0061nted"}]}',
            b'{"items": [{"sku": "plant"}]}', b'{"items": [{"sk": "planted"}]}', b'{"items": "planted"}']
    for path, matching in (("$.items[?(@.sku == 'planted')]", [0, 1]), ('$.items[0].sku == "planted"', [0, 1]),
                           ("$..sku", [0, 1, 2])):
        f = Filters.parse(None, None, None, path)
        assert [i for i, d in enumerate(docs) if f.select([Record(d)])] == matching, path
    assert Filters.parse(None, None, None, "$.items[?(@.sku == 'p')]").required == b'"p"'
    for needless in ("$.items[?(@.sku != 'p')]", "$..sku", "$.n >= 3", "$.items[?(@.a == 'x' || @.b == 'y')]"):
        assert Filters.parse(None, None, None, needless).required is None, needless


def test_log_append_time_shows_the_brokers_timestamp_through_both_readers(broker, client, monkeypatch):
    from freshet.dashboard import scan_columns

    create_topic(broker.bootstrap, "console-log-append", 1, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    before = int(time.time() * 1000)
    producer.produce("console-log-append", b"v", b"k", timestamp=BASE_MS)  # the broker's time replaces this one
    producer.flush(10)
    url = "/api/topics/console-log-append/messages?start=oldest"
    fast = client.get(url).json()["records"]
    monkeypatch.setattr(scan_columns, "reader_options", lambda bootstrap: None)
    assert client.get(url).json()["records"] == fast
    [r] = fast
    assert r["timestamp_type"] == "log-append" and r["timestamp"] >= before - 5_000

"""``freshet ingest serve`` end to end: REST Proxy v3 and v2 produce, syslog over UDP and TCP, StatsD, each read
back from the log with a Kafka client; bad input refused with the REST Proxy's codes (nothing written) or
counted; garbage on every port leaves the server serving."""

import base64
import json
import random
import socket
import time
import uuid

import httpx
import pytest

from freshet.testing.ingest import IngestProcess, read_messages
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

V2_JSON = {"content-type": "application/vnd.kafka.json.v2+json"}


@pytest.fixture(scope="module")
def ingest(broker, tmp_path_factory):
    suffix = uuid.uuid4().hex[:8]
    server = IngestProcess(broker.bootstrap, syslog_topic=f"syslog-{suffix}", statsd_topic=f"metrics-{suffix}",
                           log_path=str(tmp_path_factory.mktemp("ingest") / "ingest.log"))
    with server:
        yield server
    assert server.process.returncode == 0  # SIGTERM: flushed and stopped cleanly


@pytest.fixture
def http(ingest):
    with httpx.Client(base_url=ingest.url, timeout=30) as client:
        yield client


def test_v3_one_record_concatenated_records_and_a_stream_land_where_the_reports_say(broker, topic_name, http):
    create_topic(broker.bootstrap, topic_name, 2)
    path = f"/v3/clusters/any-cluster/topics/{topic_name}/records"
    one = http.post(path, json={"key": {"type": "STRING", "data": "user-1"}, "value": {"data": {"page": "/"}},
                                "headers": [{"name": "trace", "value": base64.b64encode(b"t1").decode()}]})
    assert one.status_code == 200
    report = one.json()
    assert report["error_code"] == 200 and report["topic_name"] == topic_name and report["cluster_id"] == "freshet"
    assert report["key"] == {"type": "STRING", "size": 6} and report["value"] == {"type": "JSON", "size": 12}
    body = "\n".join(json.dumps({"partition_id": i % 2, "value": {"type": "BINARY",
                                 "data": base64.b64encode(f"b{i}".encode()).decode()}}) for i in range(5))
    many = http.post(path, content=body, headers={"content-type": "application/json"})
    reports = [json.loads(line) for line in many.text.splitlines()]
    assert many.status_code == 200 and [r["partition_id"] for r in reports] == [0, 1, 0, 1, 0]

    def stream():  # chunked: REST Proxy's streaming mode, records sent while earlier ones are answered
        for i in range(4):
            yield json.dumps({"value": {"type": "STRING", "data": f"s{i}"}}).encode()
            time.sleep(0.05)
    streamed = http.post(path, content=stream(), headers={"content-type": "application/json"})
    assert streamed.status_code == 200
    reports += [json.loads(line) for line in streamed.text.splitlines()]
    assert [r["error_code"] for r in reports] == [200] * 9
    stored = {(p, o): (k, v, h) for p, o, k, v, h in read_messages(broker.bootstrap, topic_name, 2)}
    assert len(stored) == 10
    assert stored[(report["partition_id"], report["offset"])] == (b"user-1", b'{"page":"/"}', [("trace", b"t1")])
    sent = [f"b{i}".encode() for i in range(5)] + [f"s{i}".encode() for i in range(4)]
    assert [stored[(r["partition_id"], r["offset"])][1] for r in reports] == sent


def test_v3_refusals_carry_the_rest_proxy_codes_and_write_nothing(broker, topic_name, http):
    create_topic(broker.bootstrap, topic_name, 1)
    path = f"/v3/clusters/c/topics/{topic_name}/records"
    missing = http.post("/v3/clusters/c/topics/no-such-topic/records", json={"value": {"data": 1}})
    assert (missing.status_code, missing.json()["error_code"]) == (404, 40403)  # the REST Proxy's v3 code
    r = http.post(path, content=b'{"value": {"data": 1}}', headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()["error_code"]) == (415, 415)
    for body, status, words in ((b'{"value": {"data": ', 400, "malformed JSON"),
                                (b'{"value": {"type": "AVRO", "data": {}}}', 400, "schema registry"),
                                (b'{"partition_id": 7, "value": {"data": 1}}', 404, "partition 7"),
                                (b'{"value": {"type": "BINARY", "data": "%%%"}}', 400, "base64"),
                                (b"\xff\xfe", 400, "")):
        r = http.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == status and r.json()["error_code"] == status and words in r.json()["message"]
    # in a request of several, the good records are written and each bad one answered in its place
    mixed = http.post(path, content=b'{"value":{"data":"ok"}} {"value":{"type":"XML","data":1}} {"value":{"data":2}}',
                      headers={"content-type": "application/json"})
    assert [json.loads(x)["error_code"] for x in mixed.text.splitlines()] == [200, 400, 200]
    assert [v for _, _, _, v, _ in read_messages(broker.bootstrap, topic_name, 1)] == [b'"ok"', b"2"]


def test_v2_json_and_binary_records_and_refusals(broker, topic_name, http):
    create_topic(broker.bootstrap, topic_name, 2)
    r = http.post(f"/topics/{topic_name}", headers=V2_JSON,
                  json={"records": [{"key": "k", "value": {"a": 1}}, {"value": [1, 2], "partition": 1}]})
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.kafka.v2+json"
    offsets = r.json()["offsets"]
    assert [o["error_code"] for o in offsets] == [None, None] and offsets[1]["partition"] == 1
    r = http.post(f"/topics/{topic_name}/partitions/0", headers={"content-type": "application/vnd.kafka.binary.v2+json"},
                  json={"records": [{"value": base64.b64encode(b"\x00bin").decode()}]})
    assert r.json()["offsets"][0]["partition"] == 0
    assert http.get("/topics").json().count(topic_name) == 1
    for path, headers, body, status, code in (
            (f"/topics/{topic_name}", V2_JSON, {"records": 5}, 422, 42201),
            (f"/topics/{topic_name}", {"content-type": "application/json"}, {"records": [{"value": "{}"}]}, 422, 42205),
            (f"/topics/{topic_name}", {"content-type": "application/vnd.kafka.avro.v2+json"}, {"records": []}, 415, 415),
            ("/topics/missing-topic", V2_JSON, {"records": [{"value": 1}]}, 404, 40401),
            (f"/topics/{topic_name}/partitions/9", V2_JSON, {"records": [{"value": 1}]}, 404, 40402)):
        r = http.post(path, headers=headers, json=body)
        assert (r.status_code, r.json()["error_code"]) == (status, code)
    values = sorted(v for _, _, _, v, _ in read_messages(broker.bootstrap, topic_name, 2))
    assert values == sorted([b'{"a":1}', b"[1,2]", b"\x00bin"])


def test_rest_proxy_details_tombstones_record_errors_and_a_missing_embedded_format(broker, topic_name, http):
    create_topic(broker.bootstrap, topic_name, 1)
    # v3 JSON null: a tombstone (null value), as the REST Proxy writes it, not the 4 bytes "null"
    r = http.post(f"/v3/clusters/c/topics/{topic_name}/records",
                  json={"key": {"type": "STRING", "data": "gone"}, "value": {"type": "JSON", "data": None}})
    assert r.status_code == 200 and "value" not in r.json()
    # v2: a record too large fails alone, with error_code 1 (non-retriable); the others are written
    big = "x" * 1_100_000
    r = http.post(f"/topics/{topic_name}", headers=V2_JSON, json={"records": [{"value": "small"}, {"value": big}]})
    assert r.status_code == 200
    ok, too_large = r.json()["offsets"]
    assert ok["error_code"] is None and ok["offset"] is not None
    assert (too_large["error_code"], too_large["offset"]) == (1, None) and "too large" in too_large["error"].lower()
    # v2 produce without an embedded format: 415 with the REST Proxy's JSON error body, nothing written
    r = http.post(f"/topics/{topic_name}", headers={"content-type": "application/vnd.kafka.v2+json"},
                  json={"records": [{"value": "aGk="}]})
    assert r.status_code == 415 and r.headers["content-type"] == "application/vnd.kafka.v2+json"
    assert r.json()["error_code"] == 415 and "embedded format" in r.json()["message"]
    assert [(k, v) for _, _, k, v, _ in read_messages(broker.bootstrap, topic_name, 1)] == [(b"gone", None),
                                                                                         (None, b'"small"')]


def test_syslog_over_udp_and_tcp_and_statsd_arrive_parsed(broker, ingest):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.sendto(b"<34>1 2003-10-11T22:14:15.003Z mymachine su - ID47 - 'su root' failed", ("127.0.0.1", ingest.syslog_port))
    udp.sendto(b"<13>Feb  5 17:32:18 web1 nginx[12]: GET / 200", ("127.0.0.1", ingest.syslog_port))
    with socket.create_connection(("127.0.0.1", ingest.syslog_port)) as tcp:  # rsyslog's two framings
        tcp.sendall(b"<14>Feb  5 17:32:19 web2 app: line framed\n")
        message = b"<15>1 2024-01-02T03:04:05Z web3 app 7 - - octet\ncounted"
        tcp.sendall(str(len(message)).encode() + b" " + message)
    udp.sendto(b"hits:1|c|@0.5\nlatency:12.5|ms|#env:prod\nnot statsd", ("127.0.0.1", ingest.statsd_port))
    wait_for(lambda: len(read_messages(broker.bootstrap, ingest.syslog_topic, 3)) >= 4, 30, "syslog records")
    events = {json.loads(v)["hostname"]: (k, json.loads(v)) for _, _, k, v, _ in
              read_messages(broker.bootstrap, ingest.syslog_topic, 3)}
    assert events["mymachine"][1]["severity_name"] == "crit" and events["mymachine"][0] == b"mymachine"
    assert (events["web1"][1]["app_name"], events["web1"][1]["procid"], events["web1"][1]["message"]) == (
        "nginx", "12", "GET / 200")
    assert events["web2"][1]["message"] == "line framed"
    assert events["web3"][1]["message"] == "octet\ncounted" and events["web3"][1]["format"] == "rfc5424"
    assert all(e["source"] == "127.0.0.1" for _, e in events.values())
    wait_for(lambda: len(read_messages(broker.bootstrap, ingest.statsd_topic, 3)) >= 2, 30, "statsd records")
    metrics = {json.loads(v)["name"]: json.loads(v) for _, _, _, v, _ in
               read_messages(broker.bootstrap, ingest.statsd_topic, 3)}
    assert (metrics["hits"]["type"], metrics["hits"]["sample_rate"]) == ("counter", 0.5)
    assert (metrics["latency"]["value"], metrics["latency"]["tags"]) == (12.5, {"env": "prod"})
    assert ingest.stats()["endpoints"]["statsd"]["malformed"] >= 1


def test_garbage_on_every_port_is_counted_and_the_server_keeps_serving(broker, ingest, http, topic_name):
    before = ingest.stats()["endpoints"]
    rng = random.Random(7)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(500):
        blob = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        udp.sendto(blob, ("127.0.0.1", ingest.syslog_port))
        udp.sendto(blob.replace(b"\n", b""), ("127.0.0.1", ingest.statsd_port))
    for port in (ingest.syslog_port, ingest.http_port):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(bytes(rng.getrandbits(8) for _ in range(5000)) + b"\r\n\r\n")
            raw.settimeout(2)
            try:
                raw.recv(100)
            except (TimeoutError, ConnectionError):
                pass
    wait_for(lambda: ingest.stats()["endpoints"]["statsd"]["malformed"] >= before["statsd"]["malformed"] + 400,
             30, "bad StatsD lines counted")
    after = ingest.stats()["endpoints"]
    # a syslog relay keeps what it cannot parse (RFC 3164): as user.notice, marked and counted
    assert after["syslog-udp"]["received"] - before["syslog-udp"]["received"] == 500 - after["syslog-udp"]["dropped"]
    assert after["syslog-udp"]["malformed"] > before["syslog-udp"]["malformed"]
    create_topic(broker.bootstrap, topic_name, 1)
    ok = http.post(f"/v3/clusters/c/topics/{topic_name}/records", json={"value": {"data": "still here"}})
    assert ok.status_code == 200


def test_metrics_endpoint_counts_per_endpoint_and_outcome(ingest, http):
    text = http.get("/metrics").text
    assert 'freshet_ingest_records_total{endpoint="http",outcome="delivered",protocol="http"}' in text
    assert "freshet_ingest_buffer_limit 100000.0" in text and "freshet_ingest_log_reachable 1.0" in text
    assert 'freshet_ingest_endpoint{endpoint="syslog-udp",figure="kernel_drops"}' in text


def test_busy_port_or_unreachable_log_is_a_one_line_error(broker):
    import subprocess
    import sys

    from freshet.local import free_port

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    udp_busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp_busy.bind(("127.0.0.1", 0))
    cases = ((["-b", broker.bootstrap, "--http-port", str(busy.getsockname()[1])], "cannot listen for HTTP"),
             (["-b", broker.bootstrap, "--http-port", str(free_port()), "--syslog-udp", str(udp_busy.getsockname()[1])],
              "cannot listen for syslog UDP"),
             (["-b", f"127.0.0.1:{free_port()}", "--http-port", str(free_port())], "cannot reach a broker"))
    for args, words in cases:
        run = subprocess.run([sys.executable, "-m", "freshet.cli.main", "ingest", "serve", *args],
                             capture_output=True, text=True, timeout=60)
        errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
        assert run.returncode == 1 and len(errors) == 1 and words in errors[0], run.stderr
    busy.close()
    udp_busy.close()

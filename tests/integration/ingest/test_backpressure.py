"""With the log down, the ingest server buffers up to its bound, then tells HTTP clients to come back later
(503 with Retry-After) and drops UDP datagrams, counting them; when the log is back every record it
acknowledged is in the log, and nothing it refused is."""

import socket
import threading

import httpx

from freshet.testing.ingest import IngestProcess, read_messages
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic


def test_log_down_buffer_full_then_retry_after_and_drops_and_no_acknowledged_record_lost(own_broker, tmp_path):
    create_topic(own_broker.bootstrap, "orders", 1)
    path = "/v3/clusters/c/topics/orders/records"
    with IngestProcess(own_broker.bootstrap, args=["--buffer", "20", "--ack-timeout", "120"],
                       log_path=str(tmp_path / "ingest.log")) as ingest:
        assert httpx.post(ingest.url + path, json={"value": {"data": "before"}}).status_code == 200
        own_broker.stop()
        wait_for(lambda: not ingest.stats()["log_reachable"], 30, "the server to notice the log is down")
        answers: dict[int, httpx.Response] = {}

        def post(i: int) -> None:  # five records a request, held until the log acknowledges them
            body = "".join(f'{{"value": {{"data": "r{i}-{j}"}}}}' for j in range(5))
            answers[i] = httpx.post(ingest.url + path, content=body, headers={"content-type": "application/json"},
                                    timeout=180)
        senders = [threading.Thread(target=post, args=(i,)) for i in range(4)]
        for t in senders:
            t.start()
        wait_for(lambda: ingest.stats()["buffered"] == 20, 30, "20 records buffered")
        refused = httpx.post(ingest.url + path, json={"value": {"data": "refused"}})
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
        assert refused.json()["error_code"] == 503 and "unreachable" in refused.json()["message"]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(30):
            udp.sendto(b"<13>Feb  5 17:32:18 host app: dropped while full", ("127.0.0.1", ingest.syslog_port))
        wait_for(lambda: ingest.stats()["endpoints"]["syslog-udp"]["dropped"] == 30, 30, "30 datagrams dropped")
        stats = ingest.stats()
        assert stats["endpoints"]["http"]["rejected"] == 1 and stats["buffered"] == 20, stats
        metrics = httpx.get(ingest.url + "/metrics").text
        assert 'freshet_ingest_records_total{endpoint="syslog-udp",outcome="dropped",protocol="syslog"} 30.0' in metrics
        assert "freshet_ingest_log_reachable 0.0" in metrics
        own_broker.start()
        for t in senders:
            t.join(150)
        assert all(answers[i].status_code == 200 for i in range(4)), {i: a.text for i, a in answers.items()}
        acknowledged = {"before"} | {f"r{i}-{j}" for i in range(4) for j in range(5)}
        offsets = sorted(__import__("json").loads(line)["offset"] for a in answers.values() for line in a.text.splitlines())
        assert len(set(offsets)) == 20
    stored = [v.decode().strip('"') for _, _, _, v, _ in read_messages(own_broker.bootstrap, "orders", 1)]
    assert sorted(stored) == sorted(acknowledged) and "refused" not in stored


def test_policy_wait_holds_a_request_until_the_log_makes_room(own_broker, tmp_path):
    create_topic(own_broker.bootstrap, "held", 1)
    path = "/v3/clusters/c/topics/held/records"
    with IngestProcess(own_broker.bootstrap, args=["--buffer", "5", "--http-policy", "wait", "--http-wait", "60"],
                       log_path=str(tmp_path / "ingest.log")) as ingest:
        assert httpx.post(ingest.url + path, json={"value": {"data": "before"}}).status_code == 200
        own_broker.stop()
        wait_for(lambda: not ingest.stats()["log_reachable"], 30, "the server to notice the log is down")
        answers: dict[str, httpx.Response] = {}

        def post(name: str) -> None:
            body = "".join(f'{{"value": {{"data": "{name}-{j}"}}}}' for j in range(5))
            answers[name] = httpx.post(ingest.url + path, content=body, headers={"content-type": "application/json"},
                                       timeout=120)
        first = threading.Thread(target=post, args=("first",))
        first.start()
        wait_for(lambda: ingest.stats()["buffered"] == 5, 30, "the first request's records buffered")
        second = threading.Thread(target=post, args=("second",))  # no room: held, not refused
        second.start()
        second.join(2)
        assert second.is_alive() and ingest.stats()["endpoints"]["http"]["rejected"] == 0
        # a topic the server has not seen cannot be checked while the log is down: retry later, not 404
        unknown = httpx.post(ingest.url + "/v3/clusters/c/topics/never-seen/records", json={"value": {"data": 1}},
                             timeout=30)
        assert unknown.status_code == 503 and "retry-after" in unknown.headers
        assert "all brokers are down" in unknown.json()["message"], unknown.text
        own_broker.start()
        first.join(90)
        second.join(90)
        assert answers["first"].status_code == answers["second"].status_code == 200
    stored = sorted(v.decode().strip('"') for _, _, _, v, _ in read_messages(own_broker.bootstrap, "held", 1))
    assert stored == sorted(["before"] + [f"{n}-{j}" for n in ("first", "second") for j in range(5)])


def test_records_not_acknowledged_in_time_are_answered_retriable(own_broker, tmp_path):
    create_topic(own_broker.bootstrap, "late", 1)
    v2 = {"content-type": "application/vnd.kafka.json.v2+json"}
    with IngestProcess(own_broker.bootstrap, args=["--ack-timeout", "2"],
                       log_path=str(tmp_path / "ingest.log")) as ingest:
        first = httpx.post(ingest.url + "/topics/late", json={"records": [{"value": 0}]}, headers=v2)
        assert first.json()["offsets"][0]["offset"] == 0
        own_broker.stop()
        # taken (the buffer has room) but never acknowledged: after --ack-timeout each record is answered as
        # one that may or may not be written, REST Proxy v2's error_code 2 (retriable); v3 answers 503
        r = httpx.post(ingest.url + "/topics/late", json={"records": [{"value": 1}, {"value": 2}]}, headers=v2,
                       timeout=60)
        assert r.status_code == 200
        assert [(o["error_code"], o["offset"]) for o in r.json()["offsets"]] == [(2, None), (2, None)]
        assert all("not acknowledged" in o["error"] for o in r.json()["offsets"])
        r = httpx.post(ingest.url + "/v3/clusters/c/topics/late/records", json={"value": {"data": 3}},
                       timeout=60)
        assert r.status_code == 503 and r.json()["error_code"] == 503 and "retry-after" in r.headers
        own_broker.start()

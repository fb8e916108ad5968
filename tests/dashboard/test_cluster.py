"""The Cluster tab (``/api/cluster``, ``dashboard/cluster.py``): brokers fenced or alive with the active controller
marked, leaders and replicas per broker, ISRs, under-replicated and offline partitions, reassignments in progress;
read through the Kafka protocol (DescribeCluster v2, Metadata, ListPartitionReassignments, DescribeLogDirs). In
Chromium against a real three-broker cluster: a broker killed -9 shows as fenced and its partitions as
under-replicated."""

from types import SimpleNamespace

from fastapi.testclient import TestClient

from freshet.client.reassignment import Moving
from freshet.dashboard.app import create_app
from freshet.dashboard.cluster import figures, progress
from freshet.dashboard.collector import Collector
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

from .test_browser import open_dashboard, start_dashboard


def metadata(controller: int, brokers: list[int], topics: dict[str, list[tuple[int, list[int], list[int]]]]):
    """A confluent-kafka ClusterMetadata as list_topics gives it: topics -> [(leader, replicas, isr), ...]."""
    return SimpleNamespace(
        controller_id=controller,
        brokers={b: SimpleNamespace(id=b, host="127.0.0.1", port=9090 + b) for b in brokers},
        topics={name: SimpleNamespace(error=None, partitions={
            i: SimpleNamespace(leader=leader, replicas=replicas, isrs=isr) for i, (leader, replicas, isr) in
            enumerate(parts)}) for name, parts in topics.items()})


def test_brokers_partitions_and_reassignments_from_the_answers():
    md = metadata(2, [1, 2], {
        "orders": [(1, [1, 2, 3], [1, 2]), (2, [2, 3, 1], [2, 1]), (2, [2, 1, 3], [2, 1])],  # 2: 3 being added
        "lonely": [(-1, [3], [])],
        "elsewhere": [(1, [1, 4], [1])],  # broker 4: named by no answer
    })
    described = {"controller_id": 2, "brokers": [
        {"broker_id": b, "host": "127.0.0.1", "port": 9090 + b, "rack": f"r{b % 2}", "is_fenced": b == 3}
        for b in (1, 2, 3)]}
    moving = [Moving("orders", 2, [2, 1, 3], [3], [1], {3: (40, 300), -1: (0, 1200)})]  # 300 of 1200 bytes
    answer = figures(md, described, moving)
    brokers = {b["id"]: b for b in answer["brokers"]}
    assert [(b["id"], b["fenced"], b["controller"], b["rack"]) for b in answer["brokers"]] == [
        (1, False, False, "r1"), (2, False, True, "r0"), (3, True, False, "r1"), (4, True, False, None)]
    assert brokers[4]["host"] is None  # a replica's broker nobody names: gone
    assert {b: (x["leaders"], x["replicas"]) for b, x in brokers.items()} == {
        1: (2, 4), 2: (2, 3), 3: (0, 4), 4: (0, 1)}
    assert answer["controller"] == 2 and answer["fenced_known"] and answer["partitions"] == 5
    assert [(p["topic"], p["partition"]) for p in answer["under_replicated"]] == [  # not orders-2: its ISR lacks
        ("elsewhere", 0), ("orders", 0), ("orders", 1)]  # only the replica being added (Kafka's count)
    assert [(p["topic"], p["partition"], p["leader"]) for p in answer["offline"]] == [("lonely", 0, -1)]
    [r] = answer["reassignments"]
    assert (r["topic"], r["partition"], r["adding"], r["removing"], r["target"], r["leader"], r["isr"]) == (
        "orders", 2, [3], [1], [2, 3], 2, [2, 1])
    assert r["progress"]["line"] == "0 of 1 new replicas in sync; broker 3 at 25% (40 records behind)"
    assert (r["progress"]["in_sync"], r["progress"]["adding"]) == (0, 1)
    assert r["progress"]["fraction"] == 0.25
    assert r["progress"]["replicas"] == [{"broker": 3, "in_sync": False, "bytes": 300, "offset_lag": 40,
                                          "largest_bytes": 1200, "fraction": 0.25}]
    joined = progress(dict(r, isr=[2, 1, 3]), {})
    assert (joined["in_sync"], joined["replicas"][0]["fraction"], joined["line"]) == (
        1, 1.0, "1 of 1 new replicas in sync")
    unknown = progress(r, {-1: (0, 1200)})  # the new replica's broker did not answer: no fraction, no guess
    assert unknown["replicas"][0]["fraction"] is None and unknown["line"] == "0 of 1 new replicas in sync"

def test_without_describe_cluster_v2_the_unnamed_replica_brokers_show_as_gone_and_reassignments_as_unknown():
    md = metadata(1, [1, 2], {"t": [(1, [1, 2, 3], [1, 2])]})
    answer = figures(md, None, None)
    assert [(b["id"], b["fenced"]) for b in answer["brokers"]] == [(1, False), (2, False), (3, True)]
    assert not answer["fenced_known"] and answer["reassignments"] is None


def test_one_broker_is_the_cluster_and_its_own_controller(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    collector = Collector(broker.bootstrap)
    try:
        wait_for(lambda: topic_name in collector.collect().topics, 60, "the topic in the collector's snapshot")
        answer = TestClient(create_app(collector)).get("/api/cluster").json()
    finally:
        collector.stop()
    [only] = answer["brokers"]
    assert only["controller"] and not only["fenced"] and answer["controller"] == only["id"]
    assert f"127.0.0.1:{only['port']}" in broker.bootstrap and only["leaders"] >= 3
    [topic] = [t for t in answer["topics"] if t["name"] == topic_name]
    assert [(p["leader"], p["replicas"], p["isr"]) for p in topic["partitions"]] == [
        (only["id"], [only["id"]], [only["id"]])] * 3
    assert answer["under_replicated"] == [] and answer["offline"] == []
    # ListPartitionReassignments: none in progress, or not answered by this broker (said, never a guess)
    assert answer["reassignments"] == [] or (answer["reassignments"] is None and answer["errors"]["reassignments"])


def scraped(url: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " "))


def test_a_reassignment_in_progress_and_a_killed_broker_on_a_three_broker_cluster(page, tmp_path):
    """A throttled move is listed with its progress (and counted by its leader's ReassigningPartitions on
    /metrics) until it is cancelled; then a broker killed -9 shows as fenced, the partitions it shared
    under-replicated and the one it held alone offline (the rest of the dashboard still updating)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from freshet.client.reassignment import ReassignmentAdmin
    from freshet.local.cluster import LocalCluster

    with LocalCluster(3, directory=str(tmp_path / "cluster"), broker_args=["--metrics-port", "0"]) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("replicated", 3, 3), NewTopic("slow", 1, 1)]).values():
            future.result(60)
        [origin] = cluster.wait_until(lambda m: (p := cluster.partition("slow", 0, m)) and p["replicas"], 120)
        spare = next(b for b in (1, 2, 3) if b != origin)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
        for i in range(3000):  # ~3 MB: more than one fetch (1 MB a partition) brings
            producer.produce("slow", b"%06d" % i + b"x" * 1000)
            producer.poll(0)
        assert producer.flush(120) == 0
        moves = ReassignmentAdmin(cluster.bootstrap)
        plan = {("slow", 0): [origin, spare]}
        moves.set_throttle(plan, 1000)  # 1000 bytes/s: the new replica gets one fetch's worth, then waits
        moves.alter(plan)
        dash, port = start_dashboard(cluster.bootstrap)
        try:
            open_dashboard(page, port)
            page.click("nav a[data-tab=cluster]")
            page.wait_for_selector("#cluster-partitions tr[data-partition='replicated-2']", timeout=120_000)
            row = page.locator("#cluster-reassignments tr.reassignment[data-partition='slow-0']")
            row.wait_for(timeout=120_000)
            cells = [row.locator("td").nth(i).inner_text() for i in range(5)]
            assert cells == ["slow", "0", f"{origin}, {spare}", str(spare), ""], cells
            page.wait_for_function(  # part of the way: a fraction of the leader's bytes, records behind
                "document.querySelector(\"#cluster-reassignments tr[data-partition='slow-0'] .progress\")"
                ".textContent.includes('records behind')", timeout=120_000)
            line = row.locator(".progress").inner_text().strip()
            assert line.startswith(f"0 of 1 new replicas in sync; broker {spare} at "), line
            assert page.locator("#cluster-unhealthy tr[data-partition='slow-0']").count() == 0  # catching up
            assert scraped(cluster.metrics_url(origin), "kafka_server_replicamanager_reassigningpartitions") == 1
            assert scraped(cluster.metrics_url(origin), "kafka_server_replicamanager_underreplicatedpartitions") == 0
            assert scraped(cluster.metrics_url(spare), "kafka_server_replicamanager_reassigningpartitions") == 0
            page.screenshot(path=str(tmp_path / "cluster-reassigning.png"), full_page=True)
            moves.alter({("slow", 0): None})  # cancelled: back to its replicas, nothing listed
            moves.clear_throttle(["slow"], [origin, spare])
            page.wait_for_function("document.getElementById('reassignment-note').textContent === 'none'",
                                   timeout=120_000)
            assert page.locator("#cluster-reassignments tr.reassignment").count() == 0
            assert scraped(cluster.metrics_url(origin), "kafka_server_replicamanager_reassigningpartitions") == 0

            page.wait_for_function("document.querySelectorAll('#cluster-brokers tr.broker').length === 3",
                                   timeout=60_000)
            assert page.locator("#cluster-brokers .controller").count() == 1
            assert page.locator("#cluster-brokers .state .ok").count() == 3
            page.wait_for_selector("#cluster-unhealthy td.muted", timeout=60_000)  # none under-replicated
            page.screenshot(path=str(tmp_path / "cluster-healthy.png"), full_page=True)
            # the other pages on a cluster: records produced from the console land on each partition's leader, a
            # search by key across the leaders finds one, each partition's size comes from its brokers' DescribeLogDirs
            import httpx

            base = f"http://127.0.0.1:{port}/api/topics/replicated"
            for p in range(3):
                landed = httpx.post(f"{base}/messages", json={"partition": p, "key": f"k{p}", "value": f"v{p}"},
                                    timeout=60)
                assert landed.status_code == 200 and landed.json()["partition"] == p, landed.text
            found = httpx.get(f"{base}/messages", params={"key": "k2", "start": "oldest"}, timeout=60).json()
            assert [(r["partition"], r["value"]["text"]) for r in found["records"]] == [(2, "v2")], found
            assert found["progress"]["scanned"] == 3
            wait_for(lambda: all(x["size_bytes"] for x in httpx.get(base, timeout=60).json()["partitions"]), 60,
                     "each partition's size from DescribeLogDirs", interval=0.5)
            victim = origin  # slow's one replica: slow-0 goes offline, the replicated partitions under-replicated
            cluster.kill(victim)
            page.wait_for_selector(f"#cluster-brokers tr[data-broker='{victim}'] .state .badge", timeout=120_000)
            assert page.locator(f"#cluster-brokers tr[data-broker='{victim}'] .state").inner_text() == "fenced"
            # DescribeCluster v2 names the fenced broker with its address (Metadata no longer does)
            where = page.locator(f"#cluster-brokers tr[data-broker='{victim}'] td").nth(1).inner_text()
            assert where == f"127.0.0.1:{cluster.nodes[victim].port}"
            page.wait_for_function(
                "document.querySelectorAll('#cluster-unhealthy tr[data-partition^=\"replicated-\"]').length === 3",
                timeout=120_000)  # every partition had a replica on it: its ISR shrank
            for p in range(3):
                row = page.locator(f"#cluster-unhealthy tr[data-partition='replicated-{p}']")
                assert "under-replicated" in row.inner_text()
                assert str(victim) not in row.locator("td").nth(5).inner_text()  # not in the ISR
                assert str(victim) in row.locator("td").nth(4).inner_text()  # still a replica
            page.wait_for_selector("#cluster-unhealthy tr[data-partition='slow-0']", timeout=120_000)
            offline = page.locator("#cluster-unhealthy tr[data-partition='slow-0'] td")
            assert [offline.nth(i).inner_text() for i in (2, 3)] == ["offline", "none"]
            summary = page.locator("#cluster-summary").inner_text()
            assert "3 broker(s), 2 alive" in summary and " under-replicated, 1 offline" in summary, summary
            page.screenshot(path=str(tmp_path / "cluster-broker-killed.png"), full_page=True)
        finally:
            moves.close()
            dash.terminate()
            dash.wait(30)

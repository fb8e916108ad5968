"""The dashboard in a real browser (Debian's chromium driven by Playwright): pages render, charts update
as records flow, and stopping a pipeline from the page stops it. Screenshots go to each test's tmp dir. The
`page` fixture (a fresh browser context of a Chromium the tests share) is in conftest.py."""

import os
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.cli.gen_cmd import produce_access_logs
from freshet.local import free_port

from .pipelines import StandInPipeline
from .scrape import sample


def start_dashboard(bootstrap: str, *extra: str) -> tuple[subprocess.Popen, int]:
    """``freshet dashboard`` on a free port, reading the log at ``bootstrap``."""
    port = free_port()
    dash = subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "dashboard", "--port", str(port), *extra],
                            env={**os.environ, "FRESHET_BOOTSTRAP": bootstrap},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return dash, port


def open_dashboard(page, port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            page.goto(f"http://127.0.0.1:{port}/")
            return
        except Exception:
            assert time.monotonic() < deadline, "dashboard did not come up"
            time.sleep(0.3)


def chart_series(page, chart_id: str) -> dict | None:
    """A uPlot chart of the page as drawn: its series' labels (the time axis left out) and their values."""
    return page.evaluate("id => charts[id] ? {labels: charts[id].series.slice(1).map(s => s.label),"
                         " values: charts[id].data.slice(1)} : null", chart_id)


def wait_for_series(page, chart_id: str, label: str, ok, timeout_s: float = 30) -> list:
    """The values of the series ``label`` of a drawn chart, once ``ok(values)`` holds (it is drawn anew each round)."""
    deadline = time.monotonic() + timeout_s
    while True:
        drawn = chart_series(page, chart_id)
        values = drawn["values"][drawn["labels"].index(label)] if drawn and label in drawn["labels"] else None
        if values is not None and ok(values):
            return values
        assert time.monotonic() < deadline, f"{chart_id}'s {label}: {values}"
        time.sleep(0.3)


def children(pid: int, needle: str) -> list[int]:
    """The processes whose parent is ``pid`` and whose command line holds ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and needle in cmdline:
            found.append(int(entry))
    return found


def ended(pid: int) -> tuple[bool, int | None]:
    """(whether the process has ended, its wait status if known): a zombie its parent has not reaped yet shows its
    status in /proc/PID/stat's exit_code field (Linux 3.5+); one already reaped is gone, its status unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return True, None
    return (fields[0] == "Z", int(fields[-1]) if fields[0] == "Z" else None)


def test_dashboard_live_charts_and_stopping_a_pipeline(broker, page, tmp_path):
    """The overview's rate chart and the topic page as records flow; a pipeline stopped and restarted from the page.
    Its first run is a stand-in (the registry's records and the stop request, as a driver's reporter exchanges them,
    no JVM); the page's restart runs the command it announced, ``freshet run``, a real Spark driver: the page shows it
    running with Spark's progress, the data-flow graph it between its topic and its sink with a rate above zero, and
    stopping it from the page ends the driver (exit status 0)."""
    name = "requests-per-minute-to-console"
    panel = f".pipeline[data-name='{name}']"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("browser-logs", 2)])["browser-logs"].result(10)
    stop = threading.Event()
    producer = threading.Thread(target=produce_access_logs, kwargs=dict(
        bootstrap=broker.bootstrap, topic="browser-logs", rate=40, count=None, seconds=240, out_of_order=0.0,
        late=0.0, seed=3, time_scale=30, stop=stop))
    producer.start()
    stand_in = StandInPipeline(broker.bootstrap, name, [
        "run", "requests-per-minute", "--from", "browser-logs", "--to", "console", "--checkpoint",
        str(tmp_path / "ck"), "--trigger-seconds", "1"])
    stand_in.start()
    dash, port = start_dashboard(broker.bootstrap, "--broker-metrics", broker.metrics_url)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='pipelines']")
        page.wait_for_selector(f"{panel} button.stop", timeout=30_000)
        page.wait_for_function(f"document.querySelector(\"{panel} td\")?.innerText !== ''", timeout=30_000)
        page.click(f"{panel} button.stop")
        page.wait_for_selector(f"{panel} .pipeline-status:text('stopped')", timeout=30_000)
        stand_in.join(30)
        assert stand_in.stopped_by_request
        # restarted from the page: the command it announced (a Spark driver, its JVM starting while we look at the
        # overview and the topic page)
        page.click(f"{panel} button.restart")

        page.click("nav a[data-tab='overview']")
        page.wait_for_selector("a[data-topic='browser-logs']", timeout=30_000)
        # the rate chart gains points as records flow (one per collector round)
        page.wait_for_function("Number(document.getElementById('rate-chart').dataset.points) >= 4", timeout=30_000)
        rate = page.locator("#topics tbody tr", has_text="browser-logs").locator("td.rate").inner_text()
        assert float(rate) > 0
        page.screenshot(path=str(tmp_path / "dashboard-overview.png"))

        page.click("a[data-topic='browser-logs']")
        page.wait_for_selector("#messages tbody tr", timeout=15_000)
        assert "HTTP/1.1" in page.locator("#messages tbody").inner_text()
        assert page.locator("#partitions tbody td.segments").all_inner_texts() == ["1", "1"]  # from broker /metrics
        page.screenshot(path=str(tmp_path / "dashboard-topic.png"))

        # the data-flow graph: the running driver from its topic to its sink, the edge out with the rows per second
        # Spark processed (the driver registers once its query has started, 10-20 s on 2 cores, then reports each
        # batch's progress; the first batch's input rate is 0 by Spark's reckoning: no batch before it)
        page.click("nav a[data-tab='dataflow']")
        edge = f".flow-edge[data-from='pipeline:{name}'][data-to='sink:console']"
        page.wait_for_function(f"Number(document.querySelector(\"{edge}\")?.dataset.rate) > 0", timeout=150_000)
        assert page.locator(f".flow-edge[data-from='topic:browser-logs'][data-to='pipeline:{name}']").count() == 1
        page.screenshot(path=str(tmp_path / "dashboard-dataflow.png"))
        page.click("nav a[data-tab='pipelines']")
        page.wait_for_selector(f"{panel} .pipeline-status:text('running')", timeout=30_000)
        page.wait_for_function(f"document.querySelector(\"{panel} td\")?.innerText !== ''", timeout=30_000)
        drivers = children(dash.pid, "requests-per-minute")
        assert len(drivers) == 1, drivers  # the dashboard started it
        page.screenshot(path=str(tmp_path / "dashboard-pipelines.png"))
        page.click(f"{panel} button.stop")
        page.wait_for_selector(f"{panel} .pipeline-status:text('stopped')", timeout=60_000)
        deadline = time.monotonic() + 60  # stopping from the page ended the query, and so the driver
        while not ended(drivers[0])[0]:
            assert time.monotonic() < deadline, "the driver still runs after its query stopped"
            time.sleep(0.2)
        assert ended(drivers[0])[1] in (0, None)
        page.screenshot(path=str(tmp_path / "dashboard-pipeline-stopped.png"))
    finally:
        from freshet.client.pipeline_registry import request_stop

        request_stop(broker.bootstrap, name)  # a restarted driver, should we fail early
        stand_in.stop()
        stop.set()
        producer.join(30)
        for pid in children(dash.pid, "requests-per-minute"):  # in a session of its own: not ended with the dashboard
            if not ended(pid)[0]:
                os.kill(pid, signal.SIGTERM)
        dash.terminate()
        dash.wait(30)


def test_event_sourcing_tab_lists_aggregates_and_projection_lag(broker, page, tmp_path):
    import uuid

    from freshet.eventsourcing import CommandClient, CommandProcessor, ProjectionRunner
    from freshet.eventsourcing.examples import enrollment
    from freshet.eventsourcing.examples.enrollment import Enroll, OpenCourse, Roster

    app = enrollment.app.named(f"browser-es-{uuid.uuid4().hex[:6]}")
    app.create_topics(broker.bootstrap)
    processor = CommandProcessor(app, broker.bootstrap)
    decide = threading.Thread(target=processor.run, daemon=True)
    decide.start()
    runner = ProjectionRunner(app, Roster, f"sqlite:{tmp_path / 'views.db'}", broker.bootstrap)
    project = threading.Thread(target=runner.run, daemon=True)
    project.start()
    dash, port = start_dashboard(broker.bootstrap)
    try:
        with CommandClient(app, broker.bootstrap) as commands:
            commands.execute("course/c1", OpenCourse("Streams", 5))
            commands.answers([commands.send("course/c1", Enroll(f"s{i}", f"N{i}")) for i in range(7)])
        open_dashboard(page, port)
        page.click("nav a[data-tab='applications']")
        card = f".application[data-name='{app.name}']"
        page.wait_for_selector(f"{card} tr[data-projection='roster']", timeout=30_000)
        # one course: opened, five enrolled, two refused (full); the projection caught up
        page.wait_for_function(f"document.querySelector(\"{card} td.events\").innerText === '8'"
                               f" && document.querySelector(\"{card} td.lag\").innerText === '0'", timeout=30_000)
        page.screenshot(path=str(tmp_path / "dashboard-event-sourcing.png"))
    finally:
        runner.stop()
        project.join(10)
        runner.close()
        processor.stop()
        decide.join(30)
        dash.terminate()
        dash.wait(30)


def test_ingest_tab_shows_endpoints_policies_and_counters(broker, page, tmp_path):
    import socket
    import uuid

    import httpx

    from freshet.testing.ingest import IngestProcess

    name = f"edge-{uuid.uuid4().hex[:6]}"
    dash, port = start_dashboard(broker.bootstrap)
    try:
        with IngestProcess(broker.bootstrap, args=["--name", name], syslog_topic=f"syslog-{name}") as ingest:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for i in range(7):
                udp.sendto(f"<13>Feb  5 17:32:18 host app: line {i}".encode(), ("127.0.0.1", ingest.syslog_port))
            assert httpx.post(f"{ingest.url}/v3/clusters/c/topics/syslog-{name}/records",
                              json={"value": {"data": 1}}).status_code == 200
            open_dashboard(page, port)
            page.click("nav a[data-tab='ingest']")
            card = f".ingest-server[data-name='{name}']"
            page.wait_for_function(
                f"document.querySelector(\"{card} tr[data-endpoint='syslog-udp'] td.received\")?.innerText === '7'",
                timeout=30_000)
            row = page.inner_text(f"{card} tr[data-endpoint='syslog-udp']")
            assert "drop" in row and f"syslog-{name}" in row
            assert page.inner_text(f"{card} tr[data-endpoint='http'] td.received") == "1"
            page.screenshot(path=str(tmp_path / "dashboard-ingest.png"))
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            assert sample(metrics, "freshet_ingest_records", server=name, endpoint="syslog-udp", outcome="received") == 7
        # stopped cleanly: its tombstone takes it off the page
        page.wait_for_selector(card, state="detached", timeout=30_000)
    finally:
        dash.terminate()
        dash.wait(30)


def test_rules_tab_shows_stored_rules_and_queries_and_follows_changes(broker, page, tmp_path):
    import uuid

    from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions

    name = f"scan_{uuid.uuid4().hex[:6]}"
    rules = StoredDefinitions(broker.bootstrap, RULES_TOPIC)
    rules.put(name, f"RULE {name}\nPARTITION BY src_ip\nPATTERN (S{{6,}})\nWITHIN 3 MINUTES")
    StoredDefinitions(broker.bootstrap, WATCHES_TOPIC).put(f"{name}-q", "city = Delft AND price < 400000")
    dash, port = start_dashboard(broker.bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='rules']")
        page.wait_for_selector(f".rule[data-name='{name}']", timeout=30_000)
        page.click(f".rule[data-name='{name}'] summary")
        assert "PATTERN (S{6,})" in page.inner_text(f".rule[data-name='{name}'] pre")
        assert "city = Delft AND price < 400000" in page.inner_text(f".query[data-id='{name}-q']")
        page.screenshot(path=str(tmp_path / "dashboard-rules.png"))
        rules.remove(name)  # removed from the log: gone from the page
        page.wait_for_selector(f".rule[data-name='{name}']", state="detached", timeout=30_000)
    finally:
        dash.terminate()


def test_groups_tab_shows_a_share_group_with_its_backlog(broker, page, tmp_path):
    import uuid

    from confluent_kafka import Producer

    from freshet.testing.topics import create_topic

    topic, group = f"queue-{uuid.uuid4().hex[:6]}", f"workers-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce(topic, b"job-%d" % i, partition=i % 2)
    producer.flush(10)
    took = subprocess.run([sys.executable, "-m", "freshet.cli.main", "queue", "consume", topic, "-g", group,
                           "--from-beginning", "--max", "10", "--bootstrap", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert took.returncode == 0, took.stderr
    dash, port = start_dashboard(broker.bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='groups']")
        page.wait_for_selector(f"[data-group='{group}']", timeout=30_000)
        row = page.inner_text(f"#group-list tr:has([data-group='{group}'])")
        assert "share" in row and "30" in row  # 40 jobs, 10 done: a backlog of 30
        page.click(f"[data-group='{group}']")
        page.wait_for_selector("table.share-partitions tbody tr", timeout=30_000)
        backlogs = [int(page.inner_text(f"table.share-partitions tbody tr:nth-child({i}) td:last-child")) for i in (1, 2)]
        assert sum(backlogs) == 30
        page.screenshot(path=str(tmp_path / "dashboard-share-group.png"))
    finally:
        dash.terminate()
        dash.wait(30)


def test_clients_tab_shows_what_producers_and_consumers_push(page, tmp_path):
    """KIP-714: a producer's and a consumer's own metrics, pushed to the broker, on the Clients tab with the
    bytes per second the broker saw each produce and fetch."""
    from confluent_kafka import Consumer, Producer

    from freshet.local.broker import BrokerProcess

    with BrokerProcess(data_dir=str(tmp_path / "data"), metrics=True,
                       extra_args=["--telemetry-push-interval-ms", "500"]) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("pushed", 1)])["pushed"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "orders-writer", "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "orders-reader", "group.id": "r",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["pushed"])
        stop = threading.Event()

        def traffic():
            while not stop.is_set():
                for _ in range(200):
                    producer.produce("pushed", b"x" * 100)
                producer.poll(0)
                consumer.consume(500, 0.05)

        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        dash, port = start_dashboard(broker.bootstrap, "--broker-metrics", broker.metrics_url)
        try:
            open_dashboard(page, port)
            page.click("nav a[data-tab='clients']")
            writer, reader = ".client[data-client-id='orders-writer']", ".client[data-client-id='orders-reader']"
            page.wait_for_selector(writer, timeout=30_000)
            page.wait_for_selector(reader, timeout=30_000)
            # rates need two rounds of the broker's counters; the consumer's assignment a rebalance
            page.wait_for_function(
                f"""() => {{ const w = document.querySelector("{writer}"), r = document.querySelector("{reader}");
                  return w && r && Number(w.cells[4].textContent) > 0 && Number(r.cells[5].textContent) > 0
                    && r.cells[9].textContent === "1"; }}""", timeout=30_000)
            assert page.inner_text(f"{writer} td:nth-child(2)") == "producer"
            assert page.inner_text(f"{reader} td:nth-child(2)") == "consumer"
            assert page.inner_text(f"{writer} td:nth-child(3)").startswith("confluent-kafka-python")
            page.screenshot(path=str(tmp_path / "dashboard-clients.png"))
        finally:
            stop.set()
            worker.join(10)
            dash.terminate()
            consumer.close()

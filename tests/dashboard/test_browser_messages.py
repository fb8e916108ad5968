"""The console's Messages view in a real browser (Chromium driven by Playwright) against a real broker: a record
produced from the form, read back with confluent-kafka, then found among others with a value filter, its key and
JSON paths, shown as hex; records of an aborted and of an open transaction marked, the open one on the Transactions
tab with what it holds back."""

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import consumer_config
from freshet.testing.topics import create_topic

from .test_browser import open_dashboard, start_dashboard


def test_produce_from_the_form_then_find_it_with_a_value_filter(broker, page, tmp_path):
    topic = "browser-console"
    create_topic(broker.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(300):  # records to search among
        producer.produce(topic, json.dumps({"order": f"o-{n}", "total": n}).encode(), f"c{n % 10}".encode())
    producer.flush(10)
    dash, port = start_dashboard(broker.bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='records']")
        page.wait_for_selector(f"#produce select[name=topic] option[value='{topic}']", state="attached",
                               timeout=30_000)
        page.select_option("#produce select[name=topic]", topic)
        page.fill("#produce input[name=key]", "planted")
        page.fill("#produce textarea[name=value]", '{"order": "o-planted-4242", "total": 99}')
        page.fill("#produce textarea[name=headers]", "trace=abc")
        page.click("#produce button")
        page.wait_for_selector("#produced:has-text('at offset')", timeout=30_000)
        produced = page.locator("#produced")
        partition, offset = int(produced.get_attribute("data-partition")), int(produced.get_attribute("data-offset"))
        assert produced.inner_text() == f"written to {topic} partition {partition} at offset {offset}"
        page.screenshot(path=str(tmp_path / "console-produced.png"))

        consumer = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
        try:
            consumer.assign([TopicPartition(topic, partition, offset)])
            read = None
            deadline = time.monotonic() + 30
            while read is None and time.monotonic() < deadline:
                read = next((m for m in consumer.consume(1, 0.5) if m.error() is None), None)
        finally:
            consumer.close()
        assert (read.key(), read.value(), read.headers()) == (
            b"planted", b'{"order": "o-planted-4242", "total": 99}', [("trace", b"abc")])

        page.select_option("#search select[name=topic]", topic)
        page.select_option("#search select[name=start]", "oldest")
        page.fill("#search input[name=value]", "o-planted-42")
        page.click("#search button")
        # the line grows while the server scans ("… " at its end), then the answer's own
        page.wait_for_function("/match(es)?$/.test(document.getElementById('progress').textContent)", timeout=30_000)
        assert page.locator("#progress").inner_text() == "scanned 301 of 301, 1 match"
        rows = page.locator("#record-list tbody tr")
        assert rows.count() == 1
        assert rows.first.get_attribute("data-offset") == str(offset)
        assert rows.first.get_attribute("data-partition") == str(partition)
        cells = rows.first.locator("td").all_inner_texts()
        assert cells[3] == "planted" and json.loads(cells[4]) == {"order": "o-planted-4242", "total": 99}
        assert "trace=abc" in cells[5] and "create" in cells[2]
        download = page.get_attribute("#download", "href")
        assert "format=jsonl" in download and "value=o-planted-42" in download
        page.screenshot(path=str(tmp_path / "console-found.png"))

        # the same record by its key, then by a JSON path compared with a number (the number scan), and with a string
        page.fill("#search input[name=value]", "")
        for field, wanted, found in (("key", "planted", "1 match"), ("json_path", "$.total == 99", "2 matches"),
                                     ("json_path", '$.order == "o-planted-4242"', "1 match")):
            page.fill("#search input[name=key]", wanted if field == "key" else "")
            page.fill("#search input[name=json_path]", wanted if field == "json_path" else "")
            page.evaluate("document.getElementById('progress').textContent = ''")
            page.click("#search button")
            page.wait_for_function("/match(es)?$/.test(document.getElementById('progress').textContent)",
                                   timeout=30_000)
            assert page.locator("#progress").inner_text() == f"scanned 301 of 301, {found}", (field, wanted)
            rows = page.locator("#record-list tbody tr")  # o-99 has a total of 99 too
            assert [(r.get_attribute("data-partition"), r.get_attribute("data-offset")) for r in rows.all()
                    if "o-planted-4242" in r.inner_text()] == [(str(partition), str(offset))]
        page.fill("#search input[name=json_path]", "")

        # paging: 301 records, 120 a page, oldest first; Next twice, then Previous shows page 2 again
        page.fill("#search input[name=value]", "")
        page.fill("#search input[name=limit]", "120")
        page.click("#search button")
        page.wait_for_selector("#page-number:has-text('page 1')", timeout=30_000)
        seen = []
        for number in (2, 3):
            seen.append(page.locator("#record-list tbody tr").count())
            page.click("#next-page")
            page.wait_for_selector(f"#page-number:has-text('page {number}')", timeout=30_000)
        seen.append(page.locator("#record-list tbody tr").count())
        assert seen == [120, 120, 61] and page.locator("#next-page").is_disabled()
        page.click("#previous-page")
        page.wait_for_selector("#page-number:has-text('page 2')", timeout=30_000)
        assert page.locator("#record-list tbody tr").count() == 120 and not page.locator("#next-page").is_disabled()

        # the value as hex: its bytes
        page.fill("#search input[name=limit]", "50")
        page.fill("#search input[name=key]", "planted")
        page.select_option("#search select[name=view]", "hex")
        page.evaluate("document.getElementById('progress').textContent = ''")
        page.click("#search button")
        page.wait_for_selector("#record-list tbody tr:not(.preview) pre.hex", timeout=30_000)
        assert page.locator("#record-list tbody tr td:nth-child(5) pre.hex").inner_text() == " ".join(
            f"{b:02x}" for b in b'{"order": "o-planted-4242", "total": 99}')
        page.select_option("#search select[name=view]", "json")
        page.fill("#search input[name=key]", "")

        # a transaction aborted, one committed, one left open: the first and the last marked, the open one listed on
        # the Transactions tab with the records it holds back from read_committed consumers
        txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "browser-console-txn"})
        txn.init_transactions(30)
        for value, end in ((b"tx-aborted", txn.abort_transaction), (b"tx-committed", txn.commit_transaction),
                           (b"tx-open", None)):
            txn.begin_transaction()
            txn.produce(topic, value, b"tx", partition=0)
            txn.flush(10)
            if end is not None:
                end(30)
        try:
            page.fill("#search input[name=value]", "tx-")
            page.click("#search button")
            page.wait_for_selector("#record-list tbody tr:not(.preview) td:has-text('tx-open')", timeout=30_000)
            marks = {r.locator("td:nth-child(5)").inner_text(): r.locator("td:nth-child(7)").inner_text()
                     for r in page.locator("#record-list tbody tr").all()}
            assert marks == {"tx-aborted": "aborted", "tx-committed": "", "tx-open": "open"}
            page.screenshot(path=str(tmp_path / "console-transactions-marked.png"))
            page.click("nav a[data-tab='transactions']")
            row = "#transaction-list tbody tr:has-text('browser-console-txn')"
            page.wait_for_selector(row, timeout=30_000)
            cells = page.locator(row).locator("td").all_inner_texts()
            assert cells[2] == "Ongoing" and cells[3] == f"{topic}-0" and cells[6] == "1", cells
            page.screenshot(path=str(tmp_path / "console-transactions.png"))
        finally:
            txn.commit_transaction(30)
        page.click("nav a[data-tab='records']")
        page.fill("#search input[name=value]", "")

        page.fill("#search input[name=json_path]", "$.[[")  # a bad filter: one line saying why
        page.click("#search button")
        page.wait_for_selector("#search-error:has-text('bad JSON path')", timeout=30_000)

        page.click("nav a[data-tab='overview']")  # the topic page's own short list of the newest records
        page.click(f"a[data-topic='{topic}']")
        page.wait_for_selector("#messages tbody tr", timeout=30_000)
        assert '"order"' in page.locator("#messages tbody").inner_text()
    finally:
        dash.terminate()
        dash.wait(30)

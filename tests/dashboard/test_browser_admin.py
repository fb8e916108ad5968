"""The console's administration in a real browser (Chromium driven by Playwright) against a real broker: a topic
created from the dialog, a bad config value refused with the broker's own message shown inline and a good one
applied, then a group's offsets reset to earliest: a dry run first (nothing committed), then Execute; the group's lag
chart (the total and each partition, a sample a round) goes on across the reset."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from freshet.client import consumer_config
from freshet.testing.topics import create_topic

from .test_browser import chart_series, open_dashboard, start_dashboard, wait_for_series


def committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer(consumer_config(bootstrap, group, overrides={"log_level": 0}))
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(2)], 10)]
    finally:
        consumer.close()


def test_create_a_topic_edit_its_config_and_reset_a_group_with_a_dry_run(broker, page, tmp_path):
    topic, group = "browser-admin", "browser-admin-readers"
    dash, port = start_dashboard(broker.bootstrap)
    try:
        open_dashboard(page, port)
        page.click("#new-topic")
        page.fill("#create-topic-form input[name=name]", topic)
        page.fill("#create-topic-form input[name=partitions]", "2")
        page.fill("#create-topic-form textarea[name=configs]", "retention.ms=3600000")
        page.click("#create-topic-form button[value=create]")
        page.wait_for_selector("#create-topic", state="hidden", timeout=30_000)
        page.screenshot(path=str(tmp_path / "console-topic-created.png"))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics[topic].partitions) == 2

        page.wait_for_selector(f"#topics a[data-topic='{topic}']", timeout=30_000)
        page.fill("#topic-filter", topic)  # find by name: only its row, with its retention and cleanup policy
        page.wait_for_function("document.querySelectorAll('#topics tbody tr').length === 1", timeout=30_000)
        row = page.locator("#topics tbody tr")
        assert row.locator("td.retention").inner_text() == "1 h" and row.locator("td.cleanup").inner_text() == "delete"
        page.fill("#topic-filter", "")
        page.click(f"#topics a[data-topic='{topic}']")
        page.wait_for_selector("#configs tr.config[data-name='retention.ms']", timeout=30_000)
        page.click("#configs tr.config[data-name='cleanup.policy']")
        assert page.input_value("#config-edit input[name=name]") == "cleanup.policy"
        page.fill("#config-edit input[name=value]", "sometimes")
        page.click("#config-edit button[value=set]")
        page.wait_for_selector("#config-error:has-text('INVALID_CONFIG')", timeout=30_000)
        error = page.locator("#config-error").inner_text()
        assert error.startswith(f"cannot change configs of '{topic}': INVALID_CONFIG: ") and "cleanup.policy" in error
        page.screenshot(path=str(tmp_path / "console-config-refused.png"))
        page.fill("#config-edit input[name=value]", "compact,delete")
        page.click("#config-edit button[value=set]")
        page.wait_for_selector("#configs tr.config[data-name='cleanup.policy'] td:has-text('compact,delete')",
                               timeout=30_000)
        assert page.locator("#config-error").inner_text() == ""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        assert admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value == "compact,delete"

        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for n in range(20):
            producer.produce(topic, f"v{n}".encode(), f"k{n}".encode(), partition=n % 2)
        producer.flush(10)
        reader = Consumer(consumer_config(broker.bootstrap, group, overrides={"log_level": 0}))
        try:
            reader.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 7)], asynchronous=False)
        finally:
            reader.close()

        page.click("nav a[data-tab='groups']")
        page.wait_for_selector(f"#group-list a[data-group='{group}']", timeout=30_000)
        # every group's lag over time, the 8 lagging most (the shared broker may hold more groups than this test's)
        page.wait_for_function("charts['groups-lag-chart']", timeout=30_000)
        listed = page.locator("#group-list a[data-group]").evaluate_all("links => links.map(a => a.dataset.group)")
        drawn = chart_series(page, "groups-lag-chart")["labels"]
        assert drawn and set(drawn) <= set(listed) and len(drawn) <= 8
        if len(listed) <= 8:
            wait_for_series(page, "groups-lag-chart", group, lambda values: values[-1] == 3)
        page.click(f"#group-list a[data-group='{group}']")
        page.wait_for_selector("#group-admin:not([hidden])", timeout=30_000)
        # its lag over time, a sample a collector round: the total and each partition (10 - 10 and 10 - 7)
        wait_for_series(page, "lag-chart", "total", lambda values: values[-1] == 3)
        drawn = chart_series(page, "lag-chart")
        assert group in page.inner_text("#lag-chart")
        assert drawn["labels"] == ["total", f"{topic}-0", f"{topic}-1"]
        assert [values[-1] for values in drawn["values"]] == [3, 0, 3]
        page.select_option("#reset-offsets select[name=topic]", topic)
        page.select_option("#reset-offsets select[name=to]", "earliest")
        assert page.is_disabled("#reset-execute")
        page.click("#reset-offsets button[value=dry-run]")
        page.wait_for_selector("#reset-plan:not([hidden]) tr[data-partition='1']", timeout=30_000)
        plan = [(r.get_attribute("data-partition"), r.locator(".current").inner_text(), r.locator(".new").inner_text())
                for r in page.locator("#reset-plan tbody tr").all()]
        assert plan == [("0", "10", "0"), ("1", "7", "0")]
        assert committed(broker.bootstrap, group, topic) == [10, 7]  # a dry run commits nothing
        page.screenshot(path=str(tmp_path / "console-reset-dry-run.png"))
        page.click("#reset-execute")
        page.wait_for_selector("#reset-result:has-text('committed:')", timeout=30_000)
        assert page.locator("#reset-error").inner_text() == ""
        deadline = time.monotonic() + 30
        while committed(broker.bootstrap, group, topic) != [0, 0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed(broker.bootstrap, group, topic) == [0, 0]
        # the chart goes on from where it was: 3 behind before the reset, 20 after it
        wait_for_series(page, "lag-chart", "total", lambda values: values[-1] == 20)
        drawn = chart_series(page, "lag-chart")
        assert [values[-1] for values in drawn["values"]] == [20, 10, 10] and 3 in drawn["values"][0]
        page.screenshot(path=str(tmp_path / "console-reset-done.png"))

        # several topics at once (as repeated --topic): one plan naming each row's topic, then one commit
        other = "browser-admin-other"
        create_topic(broker.bootstrap, other, 1)
        producer.produce(other, b"x")
        producer.flush(10)
        reader = Consumer(consumer_config(broker.bootstrap, group, overrides={"log_level": 0}))
        try:
            reader.commit(offsets=[TopicPartition(other, 0, 1)], asynchronous=False)
        finally:
            reader.close()
        page.wait_for_selector(f"#reset-offsets select[name=topic] option[value='{other}']", state="attached",
                               timeout=30_000)
        page.select_option("#reset-offsets select[name=topic]", [topic, other])
        page.select_option("#reset-offsets select[name=to]", "latest")
        page.click("#reset-offsets button[value=dry-run]")
        page.wait_for_selector(f"#reset-plan:not([hidden]) tr[data-plan-topic='{other}']", timeout=30_000)
        plan = [(r.get_attribute("data-plan-topic"), r.get_attribute("data-partition"), r.locator(".current").inner_text(),
                 r.locator(".new").inner_text()) for r in page.locator("#reset-plan tbody tr").all()]
        assert sorted(plan) == [(topic, "0", "0", "10"), (topic, "1", "0", "10"), (other, "0", "1", "1")]
        page.click("#reset-execute")
        page.wait_for_selector("#reset-result:has-text('committed:')", timeout=30_000)
        assert f"{other}-0 → 1" in page.locator("#reset-result").inner_text()
        deadline = time.monotonic() + 30
        while committed(broker.bootstrap, group, topic) != [10, 10] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed(broker.bootstrap, group, topic) == [10, 10]
    finally:
        dash.terminate()
        dash.wait(30)

"""The Security tab in a real browser (Chromium driven by Playwright) against a SASL broker with an authorizer:
a user added from the form, an ACL added (a bad operation refused in one line first) that lets that user write,
then removed from its row (the user is denied again), a quota refused with the broker's INVALID_REQUEST text and
then set; then, signed in as that user, the Pipelines tab (a registry he may not READ) is one line saying so."""

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.pipeline_registry import ensure_topics
from freshet.client.quotas import QuotaAdmin
from freshet.testing.polling import wait_for

from .secured import add_users, sasl
from .test_browser import open_dashboard, start_dashboard
from .test_security import write


def test_users_acls_and_quotas_from_the_security_tab(page, tmp_path, monkeypatch):
    from freshet.local import BrokerProcess

    data = tmp_path / "data"
    add_users(data, "admin")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--super-user", "User:admin"]) as b:
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        admin.create_topics([NewTopic("vault", 1)])["vault"].result(10)
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                                "FRESHET_SASL_USERNAME": "admin", "FRESHET_SASL_PASSWORD": "admin-pw"}.items():
            monkeypatch.setenv(variable, value)
        dash, port = start_dashboard(b.bootstrap)
        try:
            open_dashboard(page, port)
            page.click("nav a[data-tab=security]")
            page.fill("#user-form input[name=name]", "frank")
            page.fill("#user-form input[name=password]", "frank-pw")
            page.click("#user-form button")
            page.wait_for_selector("#user-list tr[data-user=frank]", timeout=30_000)
            assert write(b.bootstrap, "frank", "frank-pw") == "TOPIC_AUTHORIZATION_FAILED"

            for name, value in (("principal", "User:frank"), ("operation", "FLY"), ("resource_name", "vault")):
                page.fill(f"#acl-form input[name={name}]", value)
            page.click("#acl-form button")
            page.wait_for_selector("#acl-error:has-text('operation must be one of')", timeout=30_000)
            page.fill("#acl-form input[name=operation]", "WRITE")
            page.click("#acl-form button")
            row = "#acl-list tr:has(td:text-is('User:frank')):has(td:text-is('WRITE'))"
            page.wait_for_selector(row, timeout=30_000)
            assert page.locator("#acl-error").inner_text() == ""
            assert write(b.bootstrap, "frank", "frank-pw") is None
            page.screenshot(path=str(tmp_path / "console-security.png"), full_page=True)
            page.click(f"{row} button.delete-acl")
            page.wait_for_selector(row, state="detached", timeout=30_000)
            assert write(b.bootstrap, "frank", "frank-pw") == "TOPIC_AUTHORIZATION_FAILED"

            page.fill("#quota-form input[name=user]", "frank")
            page.select_option("#quota-form select[name=key]", "request_percentage")
            page.fill("#quota-form input[name=value]", "50")
            page.click("#quota-form button")
            page.wait_for_selector("#quota-error:has-text('INVALID_REQUEST')", timeout=30_000)
            quotas = QuotaAdmin(b.bootstrap)
            try:
                assert quotas.describe() == []
                page.select_option("#quota-form select[name=key]", "producer_byte_rate")
                page.fill("#quota-form input[name=value]", "1048576")
                page.click("#quota-form button")
                page.wait_for_selector("#quota-list tr[data-key=producer_byte_rate]", timeout=30_000)
                wait_for(lambda: [q.values for q in quotas.describe()] == [{"producer_byte_rate": 1048576.0}], 30,
                         "the quota to be set")
            finally:
                quotas.close()
        finally:
            dash.terminate()
            dash.wait(30)

        # signed in as frank, a tab made from a registry he may not READ is one line saying so
        ensure_topics(b.bootstrap)
        dash, port = start_dashboard(b.bootstrap, "--login")
        try:
            open_dashboard(page, port)  # the sign-in page
            page.fill("input[name=username]", "frank")
            page.fill("input[name=password]", "frank-pw")
            page.click("button[type=submit]")
            page.click("nav a[data-tab=pipelines]")
            line = page.wait_for_selector("#pipelines > p.tab-error:has-text('TOPIC_AUTHORIZATION_FAILED')",
                                          timeout=30_000)
            assert line.inner_text() == ("cannot show the pipelines: TOPIC_AUTHORIZATION_FAILED: this user may not "
                                         "read __freshet_pipelines")
            page.screenshot(path=str(tmp_path / "console-refused-tab.png"))
        finally:
            dash.terminate()
            dash.wait(30)

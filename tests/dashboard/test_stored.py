"""CEP rules and stored search queries changed from the console (issue 49), as `freshet rules add / remove` and
`freshet watch add / remove` change them: checked first (a wrong one stores nothing), written to the registry topic,
listed once the dashboard's round has read it; from the API and from the page in Chromium. A broker of the test's
own: the registry topics are global names that other tests on the shared broker read."""

from fastapi.testclient import TestClient

from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector

from .test_browser import open_dashboard, start_dashboard

RULE = """RULE many_logins
PARTITION BY user
ORDER BY event_time
MEASURES FIRST(A.user) AS user, COUNT(*) AS attempts
PATTERN (A{3,})
WITHIN 1 MINUTE
AFTER MATCH SKIP PAST LAST ROW"""


def stored(bootstrap: str, topic: str) -> dict:
    definitions = StoredDefinitions(bootstrap, topic)
    try:
        return definitions.refresh()
    finally:
        definitions.close()


def test_rules_and_queries_are_added_and_removed_from_the_api_and_the_page(own_broker, page, tmp_path):
    bootstrap = own_broker.bootstrap
    collector = Collector(bootstrap)
    client = TestClient(create_app(collector))

    bad = client.post("/api/rules", json={"text": RULE + "\n\nRULE broken\nPATTERN (A\n"})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("RULE broken: ")
    assert client.post("/api/rules", json={"text": RULE + "\n\n" + RULE}).json()["detail"] == \
        "rule many_logins is given twice"
    assert client.post("/api/rules", json={"text": "-- nothing"}).status_code == 400
    assert stored(bootstrap, RULES_TOPIC) == {}  # nothing of a refused request was written
    added = client.post("/api/rules", json={"text": RULE})
    assert added.status_code == 201 and list(added.json()["added"]) == ["many_logins"]
    assert stored(bootstrap, RULES_TOPIC)["many_logins"]["text"] == RULE

    assert client.post("/api/queries", json={"text": "city = (", "id": "q1"}).status_code == 400
    assert client.post("/api/queries", json={"text": "city = Delft", "id": "no spaces"}).json()["detail"] == \
        "id 'no spaces': letters, digits, '-', '_' and '.' only"
    query = client.post("/api/queries", json={"text": "city = Delft AND price < 400000"})
    assert query.status_code == 201 and query.json()["added"].startswith("q-")
    collector.collect()
    listed = client.get("/api/rules").json()
    assert list(listed["rules"]) == ["many_logins"] and list(listed["queries"]) == [query.json()["added"]]
    assert client.delete("/api/queries/nope").status_code == 404
    assert client.delete(f"/api/queries/{query.json()['added']}").json() == {"removed": query.json()["added"]}
    assert stored(bootstrap, WATCHES_TOPIC) == {}

    dash, port = start_dashboard(bootstrap)
    try:
        open_dashboard(page, port)
        page.click("nav a[data-tab='rules']")
        page.wait_for_selector("#rule-list details.rule[data-name='many_logins']", timeout=30_000)
        page.fill("#add-rules textarea[name=text]", "RULE wrong\nPATTERN (")
        page.click("#add-rules button")
        page.wait_for_selector("#rules-error:has-text('RULE wrong: ')", timeout=30_000)
        page.fill("#add-rules textarea[name=text]", RULE.replace("many_logins", "from_the_page"))
        page.click("#add-rules button")
        page.wait_for_selector("#rule-list details.rule[data-name='from_the_page']", timeout=30_000)
        assert page.locator("#rules-error").inner_text() == ""
        page.fill("#add-query input[name=text]", "city = Delft")
        page.fill("#add-query input[name=id]", "delft")
        page.click("#add-query button")
        page.wait_for_selector("#query-list tr.query[data-id='delft']", timeout=30_000)
        page.screenshot(path=str(tmp_path / "console-rules.png"), full_page=True)
        page.click("#rule-list button.remove-rule[data-name='many_logins']")
        page.wait_for_selector("#rule-list details.rule[data-name='many_logins']", state="detached", timeout=30_000)
        assert sorted(stored(bootstrap, RULES_TOPIC)) == ["from_the_page"]
        assert stored(bootstrap, WATCHES_TOPIC)["delft"]["text"] == "city = Delft"
    finally:
        dash.terminate()
        dash.wait(30)
        collector.stop()

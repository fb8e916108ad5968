"""Click tracking from a real browser (Debian's chromium via Playwright): a page on another origin runs the
snippet from docs/ingest.md; a click sends a beacon, a cross-origin fetch with a JSON body passes the CORS
preflight; both records arrive with the page's origin."""

import json
import os
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from freshet.testing.ingest import IngestProcess, read_messages
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "ingest.md")
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def snippet() -> str:
    text = open(DOCS).read()
    return re.search(r"<!-- snippet:beacon -->\n```html\n(.*?)```", text, re.DOTALL).group(1)


def test_beacons_and_cors_fetch_from_a_page_of_another_origin(broker, topic_name, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is missing: `make test` installs it (scripts/install-test-deps.sh)")
    from playwright.sync_api import sync_playwright

    create_topic(broker.bootstrap, topic_name, 1)
    with IngestProcess(broker.bootstrap, log_path=str(tmp_path / "ingest.log")) as ingest:
        page_html = ("<html><body><button id='buy' data-track='buy-button'>Buy</button>"
                     + snippet().replace("http://127.0.0.1:8082/beacon/clicks", f"{ingest.url}/beacon/{topic_name}")
                     + "</body></html>").encode()

        class Page(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page_html)))
                self.end_headers()
                self.wfile.write(page_html)

            def log_message(self, *args):
                pass

        site = ThreadingHTTPServer(("127.0.0.1", 0), Page)  # another port: another origin
        threading.Thread(target=site.serve_forever, daemon=True).start()
        origin = f"http://127.0.0.1:{site.server_address[1]}"
        try:
            with sync_playwright() as p:
                context = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=chromium,
                                                               args=FLAGS)
                page = context.new_page()
                page.goto(origin + "/shop")
                page.click("#buy")
                status = page.evaluate("""async (url) => {
                    const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                                                body: JSON.stringify({type: "checkout", total: 42})});
                    return r.status;  // readable only if the CORS answer allowed this origin
                }""", f"{ingest.url}/beacon/{topic_name}?key=fetch")
                assert status == 204
                wait_for(lambda: len(read_messages(broker.bootstrap, topic_name, 1)) == 2, 30, "two records")
                context.close()
        finally:
            site.shutdown()
            site.server_close()
    records = read_messages(broker.bootstrap, topic_name, 1)
    click = next(json.loads(v) for _, _, k, v, _ in records if k != b"fetch")
    assert (click["type"], click["target"], click["page"]) == ("click", "buy-button", "/shop")
    assert all(dict(h)["origin"] == origin.encode() for *_, h in records)
    assert "Chrome" in dict(records[0][4])["user-agent"].decode()
    assert json.loads(next(v for _, _, k, v, _ in records if k == b"fetch")) == {"type": "checkout", "total": 42}

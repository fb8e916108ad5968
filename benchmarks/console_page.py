"""The console's page in Chromium (issue 49's "first paint < 1 s", "the first matches on screen in < 1 s"):
``freshet dashboard`` against a broker, the page opened ``--rounds`` times in a fresh tab, timing

- first paint and first contentful paint (the browser's own ``performance`` entries, from navigation start),
- the overview's topic table with rows on screen (the first data),
- with ``--bootstrap`` of a broker holding ``benchmarks/console_search.py``'s topic (1M records): searches from the
  Messages tab for its planted record, by key and by a JSON path compared with a number, from the click to the first
  progress line on screen, to the planted record on screen, and to the answer.

Prints one JSON object: medians and each round's figures, and the machine's load average. Needs Debian's chromium
and Playwright (the test extra), as the browser tests do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from freshet.local import BrokerProcess
from freshet.testing.topics import create_topic

SEARCH_TOPIC = "console-search-bench"  # console_search.py's
SEARCHES = (("key", "key", "needle"), ("json_number", "json_path", "$.amount > 999999"))  # its planted record
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/overview", timeout=5) as r:
                if json.load(r).get("at"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the dashboard did not come up")
        time.sleep(0.2)


def one_round(context, port: int, search: bool) -> dict:
    page = context.new_page()
    try:
        page.goto(f"http://127.0.0.1:{port}/")
        shown = page.wait_for_function("document.querySelector('#topics tbody tr') && performance.now()",
                                       timeout=60_000).json_value()
        paints = {e["name"]: e["startTime"] for e in page.evaluate(
            "performance.getEntriesByType('paint').map(e => ({name: e.name, startTime: e.startTime}))")}
        out = {"first_paint_ms": round(paints.get("first-paint", -1)),
               "first_contentful_paint_ms": round(paints.get("first-contentful-paint", -1)),
               "topics_on_screen_ms": round(shown)}
        if search:
            page.click("nav a[data-tab='records']")
            topic = page.locator(f"#search select[name=topic] option[value='{SEARCH_TOPIC}']")
            topic.wait_for(state="attached", timeout=60_000)  # the overview's first round names it
            for field, value in (("topic", SEARCH_TOPIC), ("start", "oldest")):
                page.select_option(f"#search select[name={field}]", value)
            page.fill("#search input[name=max_scan]", "100000000")
            for name, field, wanted in SEARCHES:
                for other in ("key", "json_path"):
                    page.fill(f"#search input[name={other}]", wanted if other == field else "")
                page.evaluate("document.getElementById('progress').textContent = ''; "
                              "document.querySelector('#record-list tbody').innerHTML = ''")
                began = page.evaluate("performance.now()")
                page.click("#search button")
                progress = page.wait_for_function("document.getElementById('progress').textContent"
                                                  ".startsWith('scanned') && performance.now()", timeout=300_000)
                found = page.wait_for_function("document.querySelector('#record-list tbody tr') && performance.now()",
                                               timeout=300_000)
                done = page.wait_for_function("/match(es)?$/.test(document.getElementById('progress').textContent) "
                                              "&& performance.now()", timeout=300_000)
                out.update({f"{name}_first_progress_ms": round(progress.json_value() - began),
                            f"{name}_match_on_screen_ms": round(found.json_value() - began),
                            f"{name}_done_ms": round(done.json_value() - began),
                            f"{name}_progress": page.locator("#progress").inner_text()})
        return out
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bootstrap", help="a broker holding console_search.py's topic: the search is timed too")
    parser.add_argument("--topics", type=int, default=20, help="topics to create on a broker of its own")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is missing (scripts/install-test-deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as data, \
            contextlib.nullcontext(argparse.Namespace(bootstrap=args.bootstrap)) if args.bootstrap else \
            BrokerProcess(data_dir=os.path.join(data, "broker")) as broker:
        if not args.bootstrap:
            for n in range(args.topics):
                create_topic(broker.bootstrap, f"console-page-{n}", 3)
        port = free_port()
        dash = subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "dashboard", "--port", str(port)],
                                env={**os.environ, "FRESHET_BOOTSTRAP": broker.bootstrap},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_up(port)
            with sync_playwright() as p:
                context = p.chromium.launch_persistent_context(os.path.join(data, "profile"), executable_path=chromium,
                                                               args=FLAGS, viewport={"width": 1280, "height": 800})
                try:
                    one_round(context, port, False)  # warm: the browser's own start is not the page's
                    rounds = [one_round(context, port, bool(args.bootstrap)) for _ in range(args.rounds)]
                finally:
                    context.close()
        finally:
            dash.terminate()
            dash.wait(30)
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k.endswith("_ms")}
    print(json.dumps({"rounds": rounds, "median": medians, "load_average": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()

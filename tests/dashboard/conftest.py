"""One Chromium for the browser tests a worker runs one after another (Debian's chromium driven by Playwright):
each test gets a page in a fresh browser context of its own (cookies, storage and cache of its own, as a new
profile gave it), without a Chromium and a Playwright driver started for it. The browser is closed after the last
test of tests/dashboard in a row: Playwright's sync API marks the main thread's event loop as running between
its calls, which asyncio.run() of the tests elsewhere refuses."""

import shutil

import pytest

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_running: dict = {}  # "playwright", "browser": this worker's, while its tests of tests/dashboard run


def _browser():
    if "browser" not in _running:
        chromium = shutil.which("chromium")
        if chromium is None:
            pytest.fail("chromium is missing: `make test` installs it (scripts/install-test-deps.sh)")
        from playwright.sync_api import sync_playwright

        _running["playwright"] = sync_playwright().start()
        _running["browser"] = _running["playwright"].chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
    return _running["browser"]


def _close_browser() -> None:
    browser, playwright = _running.pop("browser", None), _running.pop("playwright", None)
    try:
        if browser is not None:
            browser.close()
    finally:
        if playwright is not None:
            playwright.stop()


@pytest.fixture
def page():
    browser = _browser()
    if not browser.is_connected():  # Chromium went away (a crash): a new one for this test
        _close_browser()
        browser = _browser()
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's fixtures torn down (its page's context closed) first
    if nextitem is None or nextitem.path.parent != item.path.parent:
        _close_browser()

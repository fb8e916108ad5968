"""The page follows the system's light or dark theme and stays usable in a phone-sized window (no tab scrolls
the page sideways: wide tables scroll inside themselves) and at 1280×800 (Chromium driven by Playwright)."""

from freshet.testing.topics import create_topic

from .test_browser import open_dashboard, start_dashboard

TABS = ("overview", "cluster", "records", "groups", "pipelines", "transactions", "security", "dataflow")


def background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_themes_follow_the_system_and_a_phone_sized_window_does_not_scroll_sideways(broker, page, tmp_path):
    create_topic(broker.bootstrap, "layout-a-topic-with-a-rather-long-name-to-stretch-tables", 3)
    dash, port = start_dashboard(broker.bootstrap)
    try:
        page.emulate_media(color_scheme="light")
        open_dashboard(page, port)
        assert background(page) == "rgb(246, 248, 250)"
        page.emulate_media(color_scheme="dark")
        assert background(page) == "rgb(13, 17, 23)"
        page.wait_for_selector("#topics tbody tr", timeout=30_000)
        page.screenshot(path=str(tmp_path / "console-dark.png"))
        for width, height in ((390, 844), (1280, 800)):
            page.set_viewport_size({"width": width, "height": height})
            for tab in TABS:
                page.click(f"nav a[data-tab={tab}]")
                sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                assert sideways <= 1, (width, tab, sideways)
            page.screenshot(path=str(tmp_path / f"console-{width}.png"), full_page=True)
    finally:
        dash.terminate()
        dash.wait(30)

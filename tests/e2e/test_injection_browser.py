"""Links carrying Markdown images, links, HTML and backticks in every key, every value, `hf`, `cmp` and `cfg`,
opened in Chromium with every request that does not go to the app's own server blocked and recorded: the pages
make no such request, and no <img>, <a>, <iframe>… from the payload is in the DOM (the payloads and links are
those of tests/dashboard/test_dashboard_injection.py, which checks the same at the Markdown level)."""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from playwright.sync_api import expect

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dashboard"))  # test_dashboard_injection.py
from test_dashboard_injection import LINKS, NOT_ECHOED  # noqa: E402

PAGE_PATHS = {"": "/", "pages/planner.py": "/planner", "pages/compare.py": "/compare"}
# Every attribute through which the DOM could fetch or navigate, on any element.
DOM_PROBE = """() => {
  const bad = [];
  const names = ["src", "href", "srcset", "action", "formaction", "poster", "data", "background", "xlink:href"];
  for (const el of document.querySelectorAll("*")) {
    for (const name of names) {
      const v = el.getAttribute(name);
      if (v && v.includes("evil")) {
        let host = "";
        try { host = new URL(v, location.href).hostname; } catch (e) { host = "?"; }
        if (host.includes("evil") || el.tagName !== "A") bad.push(el.tagName + " " + name + "=" + v.slice(0, 120));
      }
    }
    const style = el.getAttribute("style");
    if (style && style.includes("evil")) bad.push(el.tagName + " style=" + style.slice(0, 120));
  }
  return {bad, imgs: [...document.querySelectorAll("img")].map(i => i.src).filter(s => s.includes("evil")),
          frames: document.querySelectorAll("iframe, object, embed").length};
}"""


@pytest.fixture(scope="module")
def quiet_app_url(start_server):
    # the Hub endpoint is a closed local port: even a valid-looking id makes no request off this machine
    with start_server({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": None},
                      log_name="streamlit-server-injection.log") as url:
        yield url


def query_string(query: dict) -> str:
    return urlencode([(k, x) for k, v in query.items() for x in (v if isinstance(v, list) else [v])])


@pytest.mark.parametrize("name", list(LINKS))
def test_link_payload_renders_nothing_and_fetches_nothing(browser, quiet_app_url, wait, name):
    page_file, query = LINKS[name]
    app = urlsplit(quiet_app_url)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    foreign: list[str] = []

    def guard(route):
        host = urlsplit(route.request.url).hostname
        if host == app.hostname and urlsplit(route.request.url).port == app.port:
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    seen: list[str] = []
    context.on("request", lambda r: seen.append(r.url))
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{quiet_app_url}{PAGE_PATHS[page_file]}?{query_string(query)}")
        wait(page)
        expect(page.get_by_test_id("stMain")).to_be_visible()
        assert page.get_by_test_id("stException").count() == 0
        probe = page.evaluate(DOM_PROBE)
        assert probe == {"bad": [], "imgs": [], "frames": 0}, probe
        if name not in NOT_ECHOED:  # the payload is on the page, as text
            assert "evil.invalid" in page.locator("[data-testid=stApp]").inner_text()
    finally:
        context.close()
    assert foreign == [], foreign
    assert all(urlsplit(u).hostname == app.hostname for u in seen if urlsplit(u).scheme in ("http", "https")), seen

"""The planner in a real browser: a shared planner link opens on the link's job, and "open in calculator" opens
the calculator with that layout in its URL and the planner's number as its total."""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from playwright.sync_api import expect

from calculator.planning.planner import plans_for
from calculator.model.presets import get_gpu, load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Workload

QWEN = load_model("qwen2.5-7b").spec


def test_planner_link_opens_a_layout_in_the_calculator(page, app_url, artifacts, wait):
    page.goto(f"{app_url}/planner?model=qwen2.5-7b&seq=8192&pgpus=8&v=1")
    wait(page)
    expect(page.get_by_role("heading", name="Parallel layout planner")).to_be_visible()
    best = plans_for(QWEN, Workload(seq_len=8192, gpu="h100-sxm"), 8, get_gpu("h100-sxm").memory_bytes)[0]
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    button = page.get_by_role("link", name=re.compile("Open the best layout in the calculator"))
    expect(button).to_contain_text(best.label)
    assert "model=qwen2.5-7b" in page.url and "pgpus=8" in page.url  # the link's job, kept in the URL
    page.get_by_test_id("stMainBlockContainer").screenshot(path=artifacts / "planner-page.png")

    with page.context.expect_page() as opened:
        button.click()
    calc = opened.value
    wait(calc)
    query = dict(parse_qsl(urlsplit(calc.url).query))
    assert urlsplit(calc.url).path in ("", "/")
    assert query["model"] == "qwen2.5-7b" and query["seq"] == "8192"
    assert int(query.get("tp", 1)) == best.tp and int(query.get("pp", 1)) == best.pp
    assert int(query.get("dp", 1)) == best.dp and query.get("zero", "0") == str(best.zero)
    assert query.get("rc", "none") == best.recompute
    total = calc.get_by_test_id("stMetric").filter(has_text="Total per GPU").get_by_test_id("stMetricValue")
    expect(total).to_have_text(format_bytes(best.total_bytes))
    assert not calc.get_by_test_id("stAlertContentWarning").count()  # the link was read without complaint


def test_a_shared_planner_link_is_a_fresh_servers_first_visit_and_still_gets_the_app_navigation(
        page, start_server, wait):
    """The first request a fresh server gets is a planner link: Streamlit's pages-directory router would run
    pages/planner.py alone (no top navigation, a sidebar of file names); dashboard.views.entry.through_app reruns it
    through app.py, so the page has the app's navigation with Planner current and the link's job."""
    with start_server(log_name="streamlit-first-visit.log") as url:
        page.goto(f"{url}/planner?model=qwen2.5-7b&seq=8192&v=1")
        wait(page)
        expect(page.get_by_role("heading", name="Parallel layout planner")).to_be_visible()
        nav = page.get_by_test_id("stTopNavLink")
        expect(nav.filter(has_text="Calculator")).to_be_visible()
        expect(page.get_by_test_id("stSidebarNav")).to_have_count(0)  # no list of the pages/ files
        expect(page.get_by_text("sequence 8192")).to_be_visible()

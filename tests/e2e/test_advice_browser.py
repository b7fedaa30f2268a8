"""Remedies, sweeps and the step timeline in a real browser: opening a section puts it in the URL and draws it;
the combination's link opens the calculator on a job that fits. Screenshots in test-artifacts/."""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from playwright.sync_api import expect

from calculator.model.presets import load_model
from calculator.planning.remedies import advise
from calculator.core.units import format_bytes
from calculator.core.workload import Workload

LLAMA = load_model("llama-3.1-8b").spec


def test_remedies_sweep_and_timeline_open_and_the_combination_fits(page, app_url, artifacts, wait):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{app_url}/?seq=8192&v=1")
    wait(page)
    main = page.get_by_test_id("stMainBlockContainer")
    page.get_by_text("Remedies: what each lever saves").click()
    wait(page)
    assert dict(parse_qsl(urlsplit(page.url).query)).get("adv") == "true"
    table = main.get_by_test_id("stDataFrame").last
    expect(table).to_be_visible()
    combined = page.get_by_text("Combined, until it fits")
    expect(combined).to_be_visible()
    combined.scroll_into_view_if_needed()
    page.get_by_test_id("stExpander").filter(has_text="Remedies").screenshot(path=artifacts / "remedies.png")

    # Each click waits for its own key in the URL before the next: a click that lands while the previous rerun is
    # still starting would otherwise be checked before Streamlit has written it.
    page.get_by_text("Sweeps: memory against").click()
    expect(page).to_have_url(re.compile(r"[?&]swp=true"))
    wait(page)
    expect(main.get_by_test_id("stPlotlyChart")).to_have_count(2)  # breakdown, sweep: that rerun has finished
    page.get_by_text("Step timeline: the memory of each phase").click()
    expect(page).to_have_url(re.compile(r"[?&]tl=true"))
    wait(page)
    query = dict(parse_qsl(urlsplit(page.url).query))
    assert query.get("swp") == "true" and query.get("tl") == "true"
    charts = main.get_by_test_id("stPlotlyChart")
    expect(charts).to_have_count(3)  # breakdown, sweep, timeline
    page.get_by_test_id("stExpander").filter(has_text="Sweeps").screenshot(path=artifacts / "sweep.png")
    timeline = page.get_by_test_id("stExpander").filter(has_text="Step timeline")
    timeline.scroll_into_view_if_needed()
    timeline.screenshot(path=artifacts / "timeline.png")

    expected = advise(LLAMA, Workload(seq_len=8192, gpu="h100-sxm")).combined
    link = page.get_by_role("link", name="open").last.get_attribute("href")
    page.goto(link)
    wait(page)
    total = page.get_by_test_id("stMetric").filter(has_text="Total per GPU").get_by_test_id("stMetricValue")
    expect(total).to_have_text(format_bytes(expected.result.total_bytes))
    expect(page.get_by_test_id("stMetric").filter(has_text="On H100")).to_contain_text("fits")
    assert not page.get_by_test_id("stAlertContentWarning").count()  # the link was read without complaint

"""Screenshot-ready at 1440×900: the headline metrics, the one-line workload summary, the chart with its legend and
the six fit cards lie within the first 900 px, so one screenshot of the viewport says what it shows. Screenshots
of every page go to test-artifacts/."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from calculator.core.fit import FIT_CARD_GPUS

FOLD = 900
PAGES = {"planner": "Parallel layout planner", "compare": "Compare scenarios", "formulas": None, "accuracy": None,
         "about": None}


@pytest.fixture
def screen(browser):
    context = browser.new_context(viewport={"width": 1440, "height": FOLD}, device_scale_factor=1)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()


def _bottom(page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not drawn"
    return box["y"] + box["height"]


@pytest.mark.parametrize("query, name", [("", "default"), ("model=llama-3.1-70b&tp=8&pp=4&dp=2&zero=1", "pp4"),
                                         ("mode=infer&seq=32768&mbs=8", "inference")])
def test_summary_chart_and_fit_cards_are_above_the_fold(screen, app_url, artifacts, wait, query, name):
    screen.goto(f"{app_url}/?{query}")
    wait(screen)
    expect(screen.locator("[data-testid=stPlotlyChart] .legend")).to_have_count(1)
    summary = screen.locator(".st-key-summary")
    expect(summary).to_contain_text("micro-batch" if "infer" not in query else "prompt")
    cards = [f".fit-card[data-gpu='{g}']" for g in FIT_CARD_GPUS[:6]]
    for selector in ["[data-testid=stMetric]", ".st-key-summary", "[data-testid=stPlotlyChart]", *cards]:
        assert _bottom(screen, selector) <= FOLD, f"{selector} ends below the first {FOLD} px"
    screen.screenshot(path=artifacts / f"calculator-1440x900-{name}.png")


@pytest.mark.parametrize("page_path", list(PAGES))
def test_every_page_screenshot(screen, app_url, artifacts, wait, page_path):
    screen.goto(f"{app_url}/{page_path}")
    wait(screen)
    if PAGES[page_path]:
        expect(screen.get_by_role("heading", name=PAGES[page_path])).to_be_visible()
    expect(screen.locator("[data-testid=stException]")).to_have_count(0)
    # Streamlit scrolls an inner container and paints only what is in view: make the viewport as tall as the page.
    height = screen.get_by_test_id("stMainBlockContainer").bounding_box()["height"]
    screen.set_viewport_size({"width": 1440, "height": min(int(height) + 200, 12_000)})
    wait(screen)
    screen.get_by_test_id("stMainBlockContainer").screenshot(path=artifacts / f"page-{page_path}.png")


def test_the_planner_table_shows_every_row_of_its_page(screen, app_url, wait):
    """No scroll box hides layouts: the grid is as tall as its rows (Streamlit's default shows ~10 and scrolls)."""
    screen.goto(f"{app_url}/planner")
    wait(screen)
    caption = screen.get_by_text("layouts of 4 × H100 80GB SXM")
    expect(caption).to_be_visible()
    n = int(caption.inner_text().split(" layouts")[0])
    assert n > 10  # more rows than a default-height grid shows
    grid = screen.locator("[data-testid=stDataFrame]").first  # the page's one grid
    box = grid.bounding_box()
    rows = min(n, 50)  # one page
    assert box["height"] >= 35 * (rows + 1), f"{box['height']} px for {rows} rows and a header"

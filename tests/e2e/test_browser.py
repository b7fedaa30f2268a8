"""The dashboard in a real browser: shared links, keyboard on a slider, URL and total follow, reload keeps the
view, CSV download content, chart toolbar PNG, screenshots in test-artifacts/."""
from __future__ import annotations

import csv
import io
import re
import struct

from playwright.sync_api import expect

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Parallelism, Workload

QWEN = load_model("qwen2.5-7b").spec


def _expected(mbs: int):
    return estimate(QWEN, Workload(micro_batch=mbs, seq_len=8192, parallel=Parallelism(tp=2), gpu="h100-sxm"))


def _total(page):
    return page.get_by_test_id("stMetric").filter(has_text="Total per GPU").get_by_test_id("stMetricValue")


def _slider(page, label: str):
    return page.get_by_test_id("stSlider").filter(has_text=label).get_by_role("slider")


def test_shared_link_slider_reload(page, app_url, artifacts, wait):
    page.goto(f"{app_url}/?model=qwen2.5-7b&tp=2&seq=8192&v=1")
    wait(page)
    expect(_total(page)).to_have_text(format_bytes(_expected(1).total_bytes))
    thumb = _slider(page, "Micro-batch size")
    expect(thumb).to_have_value("1")

    thumb.focus()
    thumb.press("ArrowRight")
    thumb.press("ArrowRight")
    expect(page).to_have_url(re.compile(r"[?&]mbs=3(&|$)"))
    expect(_total(page)).to_have_text(format_bytes(_expected(3).total_bytes))
    wait(page)
    assert "model=qwen2.5-7b" in page.url and "tp=2" in page.url and "v=1" in page.url

    page.get_by_test_id("stPlotlyChart").screenshot(path=artifacts / "breakdown-chart.png")
    # Streamlit scrolls an inner container and paints only what is in view: make the viewport as tall as the page.
    height = page.get_by_test_id("stMainBlockContainer").bounding_box()["height"]
    page.set_viewport_size({"width": 1400, "height": int(height) + 200})
    wait(page)
    page.get_by_test_id("stMainBlockContainer").screenshot(path=artifacts / "calculator-page.png")
    page.get_by_test_id("stSidebar").screenshot(path=artifacts / "sidebar-inputs.png")
    page.set_viewport_size({"width": 1400, "height": 1000})

    page.reload()
    wait(page)
    expect(_total(page)).to_have_text(format_bytes(_expected(3).total_bytes))
    expect(_slider(page, "Micro-batch size")).to_have_value("3")
    assert re.search(r"[?&]mbs=3(&|$)", page.url)


def test_csv_pdf_and_chart_png_downloads(page, app_url, artifacts, wait):
    page.goto(f"{app_url}/?model=qwen2.5-7b&tp=2&seq=8192&v=1")
    wait(page)
    with page.expect_download() as dl:
        page.get_by_test_id("stDownloadButton").filter(has_text="Breakdown CSV").get_by_role("button").click()
    download = dl.value
    assert download.suggested_filename.endswith(".csv") and "qwen2.5-7b" in download.suggested_filename
    path = artifacts / download.suggested_filename
    download.save_as(path)
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    inputs = {r["item"]: r["value"] for r in rows if r["section"] == "input"}
    assert inputs["model"] == "qwen2.5-7b" and inputs["tp"] == "2" and inputs["seq"] == "8192"
    assert "tp=2" in inputs["link"] and "v=1" in inputs["link"]
    expected = _expected(1)
    terms = [r for r in rows if r["section"] == "term" and r["stage"] == str(expected.worst_stage)]
    assert [int(r["bytes"]) for r in terms] == [t.bytes for t in expected.terms]
    assert [r["formula"] for r in terms] == [t.formula for t in expected.terms]
    totals = {r["item"]: int(r["bytes"]) for r in rows if r["section"] == "total"}
    assert totals["total per GPU"] == expected.total_bytes

    with page.expect_download() as dl:  # built on click, in fpdf2 alone (no browser on the server)
        page.get_by_test_id("stDownloadButton").filter(has_text="PDF report").get_by_role("button").click()
    pdf = dl.value
    assert pdf.suggested_filename.endswith(".pdf")
    pdf.save_as(artifacts / pdf.suggested_filename)
    import pypdf
    report = pypdf.PdfReader(artifacts / pdf.suggested_filename)
    text = " ".join(report.pages[0].extract_text().split())
    assert len(report.pages) == 1 and "Weights" in text and "80%: safe band" in text  # the chart, drawn in the PDF
    assert format_bytes(expected.total_bytes) in text

    chart = page.get_by_test_id("stPlotlyChart")
    chart.hover()
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download plot as a PNG").click()
    png = dl.value
    assert png.suggested_filename.startswith("gpu-memory_qwen2.5-7b_train_h100-sxm_tp2")
    assert png.suggested_filename.endswith(".png")
    png_path = artifacts / png.suggested_filename
    png.save_as(png_path)
    data = png_path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = struct.unpack(">I", data[16:20])[0]
    box = chart.bounding_box()
    assert width >= 1.9 * box["width"], "toImageButtonOptions scale=2"


def test_bad_link_is_reported(page, app_url, artifacts, wait):
    # dp=inf would crash Streamlit 1.67's int input (OverflowError): the page drops it before the widget reads it.
    page.goto(f"{app_url}/?tp=abc&gpu=h900&dp=inf&mbs=3&v=1")
    wait(page)
    warning = page.get_by_test_id("stAlertContentWarning")
    for text in ("tp=abc", "gpu=h900", "dp=inf"):
        expect(warning).to_contain_text(text)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    expect(_slider(page, "Micro-batch size")).to_have_value("3")
    expect(page).not_to_have_url(re.compile(r"tp=abc|gpu=h900|dp=inf"))
    expect(_total(page)).to_have_text(format_bytes(estimate(
        load_model("llama-3.1-8b").spec, Workload(micro_batch=3, gpu="h100-sxm")).total_bytes))
    page.get_by_test_id("stMainBlockContainer").screenshot(path=artifacts / "bad-link-warning.png")


def test_more_gpus_table_is_built_when_its_expander_opens(page, app_url, wait):
    # Lazy content (bench_rerun): the table of the GPUs without a card exists only while its expander is open.
    from calculator.core.fit import FIT_CARD_GPUS
    est = estimate(load_model("llama-3.1-8b").spec, Workload(gpu="h100-sxm"))
    others = [f for f in est.fits if f.gpu not in FIT_CARD_GPUS]
    page.goto(f"{app_url}/?v=1")
    wait(page)
    expander = page.get_by_test_id("stExpander").filter(has_text=f"{len(others)} more GPUs")
    expect(expander.get_by_test_id("stTable")).to_have_count(0)
    expander.get_by_text(f"{len(others)} more GPUs").click()
    expect(expander.get_by_test_id("stTable")).to_have_count(1)
    wait(page)
    expect(expander.get_by_test_id("stTable")).to_be_visible()


def test_a_typed_value_out_of_range_shows_the_value_used(page, app_url, wait):
    # Streamlit's own min / max would keep "0" in the field while the page computed with the previous value: the
    # page puts it back in range, the field shows it, one warning under it names the field and the range.
    page.goto(f"{app_url}/?tp=2&v=1")
    wait(page)
    before = _total(page).inner_text()
    field = page.get_by_test_id("stNumberInput").filter(has_text="DP").first.locator("input")
    field.fill("0")
    field.press("Enter")
    wait(page)
    expect(field).to_have_value("1")
    expect(page.get_by_test_id("stAlertContentWarning").filter(has_text="Data parallel (DP)")).to_have_count(1)
    expect(page.get_by_test_id("stAlertContentWarning").filter(has_text="Data parallel (DP)")).to_contain_text(
        "0 is below the smallest value allowed; 1 is used")
    expect(_total(page)).to_have_text(before)
    expect(_total(page)).to_have_text(format_bytes(estimate(
        load_model("llama-3.1-8b").spec, Workload(parallel=Parallelism(tp=2), gpu="h100-sxm")).total_bytes))

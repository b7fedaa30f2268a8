"""dashboard.exports: CSV and JSON carry the engine's numbers and the inputs; the PDF is one page, with the
chart when kaleido + Chromium can render it and a stated reason when not."""
from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from calculator.model.presets import get_gpu
from dashboard import exports
from dashboard.inputs import state
from dashboard.charts import breakdown_figure

VALUES = state.reset_values({"model": "qwen2.5-7b", "tp": 4, "dp": 2, "seq": 8192, "pp": 2, "mb": 4})
LINK = "http://localhost:8501/?model=qwen2.5-7b&tp=4&dp=2&seq=8192&pp=2&mb=4&v=1"


@pytest.fixture(scope="module")
def result():
    return state.compute(VALUES)


def test_csv_has_inputs_every_term_of_every_stage_and_totals(result):
    est = result.estimate
    rows = list(csv.DictReader(io.StringIO(exports.to_csv(est, VALUES, LINK, "GiB"))))
    assert list(rows[0]) == list(exports.CSV_COLUMNS)
    inputs = {r["item"]: r["value"] for r in rows if r["section"] == "input"}
    assert inputs["model"] == "qwen2.5-7b" and inputs["tp"] == "4" and inputs["link"] == LINK
    assert set(inputs) == set(VALUES) | {"link"}
    for s in est.stages:
        terms = [r for r in rows if r["section"] == "term" and r["stage"] == str(s.stage)]
        assert [(r["item"], int(r["bytes"]), r["formula"], r["substituted"], r["source"]) for r in terms] == \
            [(t.label, t.bytes, t.formula, t.substituted, t.source) for t in s.terms]
        assert all(r["value"].endswith(" GiB") for r in terms)
        totals = {r["item"]: int(r["bytes"]) for r in rows if r["section"] == "total" and r["stage"] == str(s.stage)}
        assert totals == {"peak allocated": s.peak_allocated_bytes, "total per GPU": s.total_bytes}


def test_json_is_estimate_to_dict_plus_inputs(result):
    doc = json.loads(exports.to_json(result.estimate, VALUES, result.model, result.workload, LINK))
    assert doc["format"] == exports.FORMAT_ID and doc["link"] == LINK
    assert doc["estimate"] == json.loads(json.dumps(result.estimate.to_dict()))
    assert doc["inputs"]["tp"] == 4
    assert doc["engine_inputs"]["workload"]["parallel"]["tp"] == 4
    assert doc["engine_inputs"]["model"]["hidden_size"] == result.model.hidden_size
    from calculator.core.workload import Workload
    assert Workload.model_validate(doc["engine_inputs"]["workload"]) == result.workload


def _pages(pdf: bytes) -> int:
    return pdf.count(b"/Type /Page\n") + pdf.count(b"/Type /Page ") + pdf.count(b"/Type /Page>")


def test_pdf_without_chart_is_one_page_and_says_why(result):
    pdf = exports.to_pdf(result, VALUES, LINK, "GB", None, "kaleido is not installed", get_gpu("h100-sxm"))
    assert pdf.startswith(b"%PDF-") and b"/Count 1" in pdf
    assert b"/Subtype /Image" not in pdf
    assert LINK.encode() in pdf  # the clickable link annotation


def test_pdf_with_chart_embeds_the_image(result):
    png = _tiny_png()
    pdf = exports.to_pdf(result, VALUES, LINK, "GB", png, "", get_gpu("h100-sxm"))
    assert b"/Count 1" in pdf and b"/Subtype /Image" in pdf


def test_inputs_summary_always_states_the_main_inputs():
    text = exports.inputs_summary(VALUES)
    for key in ("model=qwen2.5-7b", "mode=train", "tp=4", "pp=2", "dp=2", "seq=8192", "gpu=h100-sxm"):
        assert key in text
    assert "mb=4" in text  # changed, not a main input


def test_chart_png_reports_why_when_kaleido_cannot_run(result, monkeypatch):
    fig = breakdown_figure(result.estimate, "GB", None)

    def boom(*a, **k):
        raise RuntimeError("no browser found")
    monkeypatch.setattr(type(fig), "to_image", boom)
    png, why = exports.chart_png(fig)
    assert png is None and "no browser found" in why


@pytest.mark.skipif(not shutil.which("chromium") and not shutil.which("chromium-browser"),
                    reason="kaleido needs a local Chromium")
def test_chart_png_renders_with_kaleido_and_chromium(result):
    pytest.importorskip("kaleido")
    png, why = exports.chart_png(breakdown_figure(result.estimate, "GB", get_gpu("h100-sxm")), width=500,
                                 height=300, scale=1)
    assert why == "" and png[:8] == b"\x89PNG\r\n\x1a\n"


def _tiny_png() -> bytes:
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"\x00\xff\x00\x00"  # one red pixel
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

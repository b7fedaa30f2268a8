"""The one-page PDF report (dashboard/pdf_report.py, chart in dashboard/pdf_chart.py), read back with pypdf: the
chart is drawn in the PDF itself (legend labels, each bar's total and segment values, the stage labels, the GPU's
line and the 80% band), with no image, no font file and no browser; a hostile model name (styled HTML with url(...)
backgrounds) in a pasted config is printed as text and makes the server request nothing (a listener on 127.0.0.1
counts connections while the page's own download callable builds the report); every report stays one page and
bounded in time whatever the link holds; and at most MAX_RENDERS are built at once."""
from __future__ import annotations

import io
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pypdf
import pytest
from streamlit.testing.v1 import AppTest

from calculator.core.units import format_bytes
from calculator.model.presets import get_gpu
from dashboard import pdf_report
from dashboard.charts import breakdown_data
from dashboard.inputs import state

ROOT = Path(__file__).resolve().parents[2]
H100 = get_gpu("h100-sxm")


def compute(query: dict):
    values = state.current_values({}, state.check_query_params(query).values)
    return values, state.compute(values)


def read(pdf: bytes) -> tuple[pypdf.PdfReader, str]:
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) == 1
    return reader, reader.pages[0].extract_text()


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("query, unit", [({}, "GB"), ({"pp": "4", "tp": "2", "dp": "2"}, "GiB"),
                                         ({"model": "qwen3-8b", "mode": "infer", "seq": "8192"}, "GB")])
def test_the_chart_is_drawn_in_the_pdf_with_the_pages_data(query, unit):
    values, result = compute(query)
    pdf = pdf_report.to_pdf(result, values, "http://localhost:8501/?v=1", unit, H100)
    reader, text = read(pdf)
    text = flat(text)
    data = breakdown_data(result.estimate, H100)
    from calculator.planning.timeline import live_sets
    est = result.estimate
    # one GPU's step moment by moment, or each pipeline stage at its own peak
    assert len(data.stages) == (len(live_sets(est.peak)) if len(est.stages) == 1 else len(est.stages))
    assert data.totals[data.peak_bar] == est.total_bytes
    for _comp, label, _colour, values_ in data.series:  # the legend: every component the bars stack
        assert label in text, label
    for total in data.totals:  # the total above each bar
        assert format_bytes(total, unit) in text
    biggest = max(v for *_, vs in data.series for v in vs)
    assert format_bytes(biggest, unit) in text  # the tallest segment carries its value
    for stage in data.stages:
        from dashboard.pdf_chart import label_lines
        assert all(part.replace("–", "-") in text for part in label_lines(stage)), stage
    # the GPU's line: what PyTorch can allocate, the capacity the header's verdict uses too
    assert f"{H100.name}: {format_bytes(H100.usable_bytes, unit)} PyTorch can allocate" in text
    assert "80%: safe band (Fujii et al. 2024)" in text
    page = reader.pages[0]
    assert "/XObject" not in (page["/Resources"] or {})  # no image: vectors
    fonts = {f["/BaseFont"] for f in page["/Resources"]["/Font"].values()}
    assert fonts <= {"/Helvetica", "/Helvetica-Bold"}  # the core font: nothing embedded, nothing parsed
    content = page.get_contents().get_data()
    assert content.count(b" re") >= sum(1 for *_, vs in data.series for v in vs if v)  # a rectangle per segment


HOSTILE = ('<div style="background:url(http://127.0.0.1:{port}/bg.png)"><svg><rect fill="url(http://127.0.0.1:'
           '{port}/fill#a)"/></svg><img src="http://127.0.0.1:{port}/img.png">**bold** [x](http://127.0.0.1:{port}/'
           'md)</div>')


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that counts every connection made to it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    hits: list[bytes] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    hits.append(conn.recv(4096))
                except OSError:
                    hits.append(b"")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1], hits
    stop.set()
    thread.join(5)
    srv.close()


def test_a_hostile_model_name_is_printed_as_text_and_fetches_nothing(listener, monkeypatch):
    port, hits = listener
    name = HOSTILE.format(port=port)
    cfg = dict(json.loads((ROOT / "presets" / "models" / "llama-3.1-8b.json").read_text()), _name_or_path=name)
    from streamlit.delta_generator import DeltaGenerator
    original, got = DeltaGenerator.download_button, {}

    def spy(self, label, data, *args, **kwargs):
        got[label] = data
        return original(self, label, data, *args, **kwargs)
    monkeypatch.setattr(DeltaGenerator, "download_button", spy)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["model"] = "config"
    at.query_params["cfg"] = json.dumps(cfg)
    at.run()
    assert not at.exception, at.exception
    pdf = got["One-page PDF report"]()  # the page's own callable, as the download button runs it
    time.sleep(0.5)  # anything the build had started would have connected by now
    assert hits == []
    reader, text = read(pdf)
    assert "".join(name[:70].split()) in "".join(text.split())  # the characters themselves, as text (2 lines)
    uris = [a.get_object()["/A"]["/URI"] for a in reader.pages[0].get("/Annots", [])]
    assert uris and all(u.startswith("http://localhost:8501/?") for u in uris)  # only the page's own link
    assert f"127.0.0.1:{port}".encode() not in b"".join(
        str(u).encode() for u in uris)  # ...whose query keeps the config %-encoded
    assert b"/JavaScript" not in pdf and b"/Launch" not in pdf and b"/XObject" not in pdf


def test_the_report_stays_one_page_and_quick_whatever_the_link_holds():
    cfg = json.loads((ROOT / "presets" / "models" / "llama-3.1-8b.json").read_text())
    cfg.update(_name_or_path="x" * 5000 + " y" * 5000, _padding="z " * 200_000)  # ~400 kB config
    values, result = compute({"model": "config", "cfg": json.dumps(cfg)})
    link = "http://localhost:8501/?model=config&cfg=" + quote(json.dumps(cfg))
    start = time.perf_counter()
    pdf = pdf_report.to_pdf(result, values, link, "GB", H100)
    assert time.perf_counter() - start < 1.0
    reader, text = read(pdf)
    assert "characters: the JSON export holds it" in text
    assert not reader.pages[0].get("/Annots")  # a link this long is not made clickable
    assert len(pdf) < 64_000


def test_at_most_max_renders_at_once_and_the_rest_wait_or_hear_busy(monkeypatch):
    values, result = compute({})
    running, peak, lock = [0], [0], threading.Lock()
    real = pdf_report.to_pdf

    def slow(*args):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        try:
            return real(*args)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(pdf_report, "to_pdf", slow)
    out: list[bytes] = []
    threads = [threading.Thread(target=lambda: out.append(pdf_report.pdf_report(result, values, "http://x/", "GB",
                                                                                 H100))) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == 12 and peak[0] == pdf_report.MAX_RENDERS
    assert all("Breakdown per GPU" in read(p)[1] for p in out)  # all waited their turn: none was turned away
    monkeypatch.setattr(pdf_report, "WAIT_S", 0.0)
    for _ in range(pdf_report.MAX_RENDERS):
        assert pdf_report._RENDERS.acquire(timeout=1)
    try:
        assert "The server is busy" in read(pdf_report.pdf_report(result, values, "http://x/", "GB", H100))[1]
    finally:
        for _ in range(pdf_report.MAX_RENDERS):
            pdf_report._RENDERS.release()

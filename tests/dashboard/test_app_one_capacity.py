"""One capacity per GPU (issue 24): on the page, the fit cards, the chart's GPU line, the PDF header and the CSV all
state a GPU's verdict against what PyTorch can allocate (GPU.usable_bytes), in every mode (vLLM / SGLang and RL
included); the device total is shown once, under the GPU selector, and named as such."""
from __future__ import annotations

import csv
import io
import json

import pypdf
import pytest

from calculator.core.units import format_bytes
from calculator.model.presets import get_gpu
from dashboard import exports, pdf_report
from dashboard.inputs import state
from tests.app_page import run
from tests.html_read import fit_cards

VIEWS = {"vllm": {"model": "qwen3-8b", "mode": "infer", "eng": "vllm", "seq": "16000", "gpu": "h200"},
         "sglang": {"model": "qwen3-8b", "mode": "infer", "eng": "sglang", "seq": "16000"},
         "rl": {"mode": "rl", "dp": "8", "zero": "3", "gpu": "h200"},
         "train": {}}


@pytest.mark.parametrize("view", list(VIEWS))
def test_card_chart_pdf_and_csv_state_one_capacity(view):
    query = VIEWS[view]
    at = run(query)
    values = state.current_values({}, state.check_query_params(query).values)
    gpu = get_gpu(values["gpu"])
    cap = format_bytes(gpu.usable_bytes, "GB")
    assert gpu.usable_bytes != gpu.memory_bytes  # a GPU with a measured PyTorch figure: the two differ
    card = fit_cards(at)[gpu.id]["text"]
    assert card.splitlines()[0].endswith(cap), card  # the card's capacity
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    lines = [a["text"] for a in spec["layout"].get("annotations", []) if "PyTorch can allocate" in a["text"]]
    assert lines == [f"{gpu.name}: {cap}<br>PyTorch can allocate"]  # the chart's line
    result = state.compute(values)
    fit = next(iter(result.estimate.fits_on([gpu.id])))
    assert fit.capacity_bytes == gpu.usable_bytes
    assert f"{fit.utilization:.0%} used" in card
    text = " ".join(pypdf.PdfReader(io.BytesIO(pdf_report.to_pdf(result, values, "http://x/?v=1", "GB", gpu)))
                    .pages[0].extract_text().split())
    assert f"{fit.name}: {fit.verdict} - {fit.utilization:.0%} of {cap} PyTorch can allocate" in text  # PDF header
    rows = {r["item"]: r for r in csv.DictReader(io.StringIO(exports.to_csv(result.estimate, values)))
            if r["section"] == "fit"}
    assert int(rows["capacity (PyTorch can allocate)"]["bytes"]) == gpu.usable_bytes
    assert rows["share of capacity"]["value"] == f"{fit.utilization:.1%}" and rows["verdict"]["value"] == fit.verdict
    # the device total: once, under the GPU selector, beside the allocatable figure
    total = format_bytes(gpu.memory_bytes, "GB")
    shown = [c.value for c in at.sidebar.caption if total in c.value]
    assert len(shown) == 1 and f"**{cap} allocatable by PyTorch**" in shown[0], shown
    assert total not in card


def test_rl_and_serving_cards_judge_against_what_pytorch_can_allocate():
    """The RL card's verdict uses the 80% band of the allocatable capacity, as the answer above the chart does."""
    from calculator.core.fit import verdict
    values = state.current_values({}, state.check_query_params(VIEWS["rl"]).values)
    est = state.compute(values).estimate
    for f in est.fits_on(["h100-sxm", "h200", "a100-40gb"]):
        g = get_gpu(f.gpu)
        assert f.capacity_bytes == g.usable_bytes and f.headroom_bytes == g.usable_bytes - f.used_bytes
        assert f.verdict == verdict(f.used_bytes, g.usable_bytes)

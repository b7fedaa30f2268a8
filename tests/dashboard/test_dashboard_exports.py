"""dashboard.exports: CSV and JSON carry the engine's numbers and the inputs (the PDF report: test_dashboard_pdf.py)."""
from __future__ import annotations

import csv
import io
import json

import pytest

from dashboard import exports
from dashboard.inputs import state

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
    assert set(inputs) == set(exports.applicable_inputs(VALUES)) | {"link"}
    for s in est.stages:
        terms = [r for r in rows if r["section"] == "term" and r["stage"] == str(s.stage)]
        assert [(r["item"], int(r["bytes"]), r["formula"], r["substituted"], r["source"]) for r in terms] == \
            [(t.label, t.bytes, t.formula, t.substituted, t.source) for t in s.terms]
        assert all(r["value"].endswith(" GiB") for r in terms)
        totals = {r["item"]: int(r["bytes"]) for r in rows if r["section"] == "total" and r["stage"] == str(s.stage)}
        assert totals == {"peak allocated": s.peak_allocated_bytes, "total per GPU": s.total_bytes}


@pytest.mark.parametrize("query, absent, present", [
    ({"model": "qwen2.5-7b"}, ["h", "layers", "ffn", "cfg", "gparams", "eng", "mfr", "rlb", "lr", "kbit"],
     ["model", "mode", "opt", "rc", "tp", "gpu"]),
    ({"model": "custom", "h": 2048, "layers": 8}, ["cfg", "gparams", "rlb"], ["h", "layers", "ffn", "heads"]),
    ({"mode": "infer", "eng": "vllm"}, ["opt", "ft", "lr", "rlb", "h"], ["eng", "mfr", "mml", "gen"]),
    ({"mode": "infer"}, ["mfr", "mml"], ["eng"]),
    ({"mode": "rl", "ft": "qlora"}, ["eng", "mfr", "h"], ["rlb", "rln", "lr", "kbit"]),
])
def test_csv_leaves_out_inputs_that_do_not_apply(query, absent, present):
    """Issue 24: the CSV carried ~95 inputs, the custom-architecture defaults among them for a preset."""
    values = state.reset_values(query)
    est = state.compute(values).estimate
    rows = list(csv.DictReader(io.StringIO(exports.to_csv(est, values))))
    inputs = {r["item"] for r in rows if r["section"] == "input"}
    assert not inputs & set(absent), inputs & set(absent)
    assert set(present) <= inputs
    assert len(inputs) < len(values)


def test_json_is_estimate_to_dict_plus_inputs(result):
    doc = json.loads(exports.to_json(result.estimate, VALUES, result.model, result.workload, LINK))
    assert doc["format"] == exports.FORMAT_ID and doc["link"] == LINK
    assert doc["estimate"] == json.loads(json.dumps(result.estimate.to_dict()))
    assert doc["inputs"]["tp"] == 4
    assert doc["engine_inputs"]["workload"]["parallel"]["tp"] == 4
    assert doc["engine_inputs"]["model"]["hidden_size"] == result.model.hidden_size
    from calculator.core.workload import Workload
    assert Workload.model_validate(doc["engine_inputs"]["workload"]) == result.workload


def test_inputs_summary_always_states_the_main_inputs():
    text = exports.inputs_summary(VALUES)
    for key in ("model=qwen2.5-7b", "mode=train", "tp=4", "pp=2", "dp=2", "seq=8192", "gpu=h100-sxm"):
        assert key in text
    assert "mb=4" in text  # changed, not a main input

"""The page's remedies, sweeps and step-timeline sections (dashboard/advice.py, advice_view.py): lazy expanders
bound to the URL, each showing the engine's figures, and remedy links that open the calculator on the changed job."""
import csv
import io
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from streamlit.testing.v1 import AppTest

from calculator import Workload, estimate
from calculator.model.presets import get_gpu, load_model
from calculator.core.units import format_bytes
from calculator.planning.remedies import advise
from calculator.planning.sweeps import sweep
from calculator.planning.timeline import step_timeline
from dashboard import advice
from dashboard.inputs import state
from calculator.exports import page_link as links

APP = Path(__file__).resolve().parents[2] / "app.py"
LLAMA = load_model("llama-3.1-8b").spec
ROOT = "http://localhost:8501/"


def run(query: dict) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_sections_are_closed_and_not_computed_by_default(monkeypatch):
    """The sweep is not computed while its section is closed; the remedies are (the first screen's answer names the
    top three, dashboard/views/answer.py), but their table is not drawn."""
    import calculator.planning.sweeps

    def boom(*a, **k):
        raise AssertionError("computed while closed")
    monkeypatch.setattr(calculator.planning.sweeps, "sweep", boom)
    at = run({"seq": "8192"})
    assert len(at.get("plotly_chart")) == 1  # only the breakdown
    assert not [d for d in at.dataframe if "Lever" in d.value.columns]
    assert any(s.value == "When it does not fit" for s in at.subheader)


def test_remedies_section_shows_the_engine_ranking_with_links_that_apply_each_lever():
    at = run({"seq": "8192", "adv": "true"})
    table = next(d.value for d in at.dataframe if "Lever" in d.value.columns)
    expected = advise(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"))
    assert list(table["Change"]) == [r.change for r in expected.remedies]
    assert table["Saved (GB)"][0] == format_bytes(expected.remedies[0].saved_bytes, "GB") and table["Fits"][0] == "yes"
    assert expected.remedies[0].saved_bytes > 100e9  # the top lever saves most of the job (151 GB here)
    for link, r in zip(table["Open"], expected.remedies):
        parts = urlsplit(link)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        assert query["adv"] == "true"  # the view kept; the job is the lever applied:
        values = state.check_query_params(query).values
        assert state.build_workload(values) == r.workload
    combined = next(m.value for m in at.markdown if "Combined, until it fits" in m.value)
    assert "offload" in combined and "fits" in combined


def test_sweep_section_charts_the_engine_and_offers_the_csv():
    at = run({"seq": "8192", "swp": "true", "swx": "seq_len"})
    fig = next(c for c in charts(at) if c["layout"]["xaxis"].get("type") == "log")
    sw = sweep(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"), "seq_len")
    total = next(t for t in fig["data"] if t["name"] == "Total per GPU")
    assert total["x"] == [p.x for p in sw.points]
    assert [round(y * 1e9) for y in total["y"]] == [p.total_bytes for p in sw.points]
    assert {s.get("y0") for s in fig["layout"]["shapes"]} >= {0.8 * get_gpu("h100-sxm").usable_bytes / 1e9}
    assert fig["layout"]["yaxis"]["range"][1] >= max(total["y"])  # the axis never clips the curve
    assert at.selectbox(key="swx").value == "seq_len"
    assert any(b.label == "Sweep CSV" for b in at.get("download_button"))


def test_timeline_section_marks_the_engine_peak():
    at = run({"seq": "8192", "tl": "true", "unit": "GiB"})
    fig = charts(at)[-1]
    assert fig["data"][0]["x"] == ["model states", "forward: tensors saved", "backward: peak", "optimizer step"]
    (note,) = fig["layout"]["annotations"]
    assert note["x"] == "backward: peak" and "peak" in note["text"]
    est = estimate(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"))
    assert round(note["y"] * 2**30) == est.peak_allocated_bytes
    assert any("backward" in c.value for c in at.caption)


def test_remedy_rows_and_sweep_csv_are_plain_data():
    adv = advise(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"), url_of=lambda w: links.url_query({}, w))
    rows = advice.remedy_rows(adv, "GB", ROOT)
    assert rows[0]["Open"] == ROOT + "?tp=8&sp=true&seq=8192&v=1" and rows[0]["GPUs"] == 8
    lines = advice.combined_lines(adv, "GB", ROOT)
    assert len(lines) == len(adv.combined.steps) and lines[-1].endswith(f"({ROOT}?{adv.combined.steps[-1].url_query}))")
    sw = sweep(LLAMA, Workload(gpu="h100-sxm"), "micro_batch", [1, 2])
    parsed = list(csv.DictReader(io.StringIO(advice.sweep_csv(sw))))
    assert [int(r["total_bytes"]) for r in parsed] == [p.total_bytes for p in sw.points]
    tl = step_timeline(estimate(LLAMA, Workload(mode="infer", seq_len=4096, gen_tokens=64)))
    fig = advice.timeline_figure(tl).to_dict()
    assert fig["layout"]["annotations"][0]["x"] == tl.peak.name

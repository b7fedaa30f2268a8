"""The Accuracy page and dashboard.accuracy: the numbers shown are validation.trace.compare's and
validation/published_comparison.json's, computed when the page runs (never typed in)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import accuracy as acc
from validation.trace.compare import load_goldens, summary

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture(scope="module")
def accuracy_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("pages/accuracy.py").run()
    assert not at.exception, at.exception
    return at


def _texts(at) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n" + "\n".join(c.value for c in at.caption)


def test_headline_is_the_real_counts(accuracy_page):
    s = summary()
    m = {x.label: x.value for x in accuracy_page.metric}
    assert m["Measured cases"] == str(s["cases"])
    assert m["Architectures"] == str(len(s["architectures"]))
    pq = s["per_quantity"]
    states_exact = all(pq[q]["worst_abs_error_pct"] == 0 for q in acc.MODEL_STATES if q in pq)
    assert (m["Model states"] == "exact") is states_exact
    assert m["Activations, worst |error|"] == f"{pq['activations']['worst_abs_error_pct']:.2f}%"
    assert m["Peak allocated, worst |error|"] == f"{pq['peak_allocated']['worst_abs_error_pct']:.2f}%"


def test_per_component_table_and_case_table(accuracy_page):
    s = summary()
    per_q = next(d.value for d in accuracy_page.dataframe if "Median |error| %" in d.value.columns
                 and "Quantity" in d.value.columns)
    assert len(per_q) == len(s["per_quantity"])
    for _, row in per_q.iterrows():
        key = next(k for k in s["per_quantity"] if acc.QUANTITIES.get(k, k) == row["Quantity"])
        assert row["Cases"] == s["per_quantity"][key]["n"]
        assert row["Worst |error| %"] == pytest.approx(s["per_quantity"][key]["worst_abs_error_pct"])
    cases = next(d.value for d in accuracy_page.dataframe if "Predicted" in d.value.columns)
    assert len(cases) == len(s["rows"])
    assert cases["Case"].nunique() == s["cases"]


def test_scatter_has_one_trace_per_quantity_and_log_axes(accuracy_page):
    s = summary()
    chart = next(c for c in accuracy_page.get("plotly_chart") if "acc_scatter" in c.proto.id)
    spec = json.loads(chart.proto.spec)
    names = [t["name"] for t in spec["data"]]
    assert sorted(names) == sorted(acc.QUANTITIES.get(q, q) for q in s["per_quantity"])
    assert all(t["mode"] == "markers" for t in spec["data"])
    layout = spec["layout"]
    assert layout["xaxis"]["type"] == layout["yaxis"]["type"] == "log"
    assert layout["xaxis"]["range"] == layout["yaxis"]["range"], "same range: the paper diagonal is y = x"
    diag = layout["shapes"][0]
    assert (diag["xref"], diag["yref"], diag["x0"], diag["y0"], diag["x1"], diag["y1"]) == ("paper", "paper", 0, 0, 1, 1)


def test_case_table_filters(accuracy_page):
    at = accuracy_page
    at.multiselect(key="acc_arch").set_value(["gpt2"])
    at.multiselect(key="acc_quantity").set_value(["activations"]).run()
    assert not at.exception
    cases = next(d.value for d in at.dataframe if "Predicted" in d.value.columns)
    meta = acc.case_meta(load_goldens())
    expected = [r for r in summary()["rows"] if r[1] == "activations" and meta[r[0]]["architecture"] == "gpt2"]
    assert len(cases) == len(expected) > 0
    assert set(cases["Architecture"]) == {"gpt2"} and set(cases["Quantity"]) == {"activations"}
    at.multiselect(key="acc_mode").set_value(["infer"]).run()
    cases = next(d.value for d in at.dataframe if "Predicted" in d.value.columns)
    assert len(cases) == 0  # inference cases measure no activations


def test_excluded_cases_with_the_reason(accuracy_page):
    s = summary()
    excluded = next(d.value for d in accuracy_page.dataframe
                    if "Case" in d.value.columns and "Predicted" not in d.value.columns)
    assert set(excluded["Case"]) == set(s["excluded"])
    assert len(excluded) == len(s["excluded"]) > 0
    assert "CPU SDPA kernel" in _texts(accuracy_page)


def test_published_comparison(accuracy_page):
    pub = json.loads(acc.PUBLISHED_JSON.read_text())
    groups = next(d.value for d in accuracy_page.dataframe if "Bound ±%" in d.value.columns)
    assert list(groups["Group"]) == [g["group"] for g in pub["groups"]]
    for _, row in groups.iterrows():
        g = next(x for x in pub["groups"] if x["group"] == row["Group"])
        assert row["Comparable"] == g["comparable"]
        if g.get("bound_pct") is not None:
            assert row["Bound ±%"] == g["bound_pct"]
    rows = next(d.value for d in accuracy_page.dataframe if "Note" in d.value.columns)
    assert len(rows) == sum(r["comparable"] for r in pub["rows"])  # comparable only, by default
    text = _texts(accuracy_page)
    assert "max_memory_allocated" in text and "nvidia-smi" in text
    assert "| constant | value | source |" in text  # CALIBRATION.md's calibrated constants


def test_about_page_points_at_it_with_computed_numbers():
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("pages/about.py").run()
    assert not at.exception
    s = summary()
    text = _texts(at)
    assert f"{s['cases']} measured cases" in text
    assert f"{s['per_quantity']['peak_allocated']['worst_abs_error_pct']:.2f}%" in text
    links = at.get("page_link")
    assert links and "accuracy" in links[0].proto.page


# ---- dashboard.accuracy on its own ----------------------------------------------------------------------------------
def test_headline_and_rows_from_a_small_summary():
    s = {"cases": 2, "architectures": ["llama", "gpt2"], "excluded": ["x__sdpa"],
         "per_quantity": {"weights": {"n": 2, "median_abs_error_pct": 0.0, "worst_abs_error_pct": 0.0},
                          "activations": {"n": 2, "median_abs_error_pct": 0.5, "worst_abs_error_pct": 1.0}},
         "rows": [("a", "weights", 10, 10, 0.0), ("b", "weights", 20, 20, 0.0),
                  ("a", "activations", 100, 99, -1.0), ("b", "activations", 100, 100.0, 0.0)]}
    h = acc.headline(s)
    assert h.cases == 2 and h.model_states_exact and h.activations_worst_pct == 1.0 and h.peak_worst_pct is None
    rows = {r["key"]: r for r in acc.per_quantity_rows(s)}
    assert rows["activations"]["Worst case"] == "a" and rows["weights"]["Worst case"] == "—"
    fig = acc.scatter_figure(s)
    assert [t.name for t in fig.data] == ["Weights", "Activations (saved for backward, incl. loss head)"]
    s["per_quantity"]["gradients"] = {"n": 1, "median_abs_error_pct": 0.1, "worst_abs_error_pct": 0.1}
    assert not acc.headline(s).model_states_exact


def test_calibrated_constants_section(tmp_path):
    md = tmp_path / "C.md"
    md.write_text("# T\n\n## Calibrated constants\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n### Next\nmore\n")
    assert acc.calibrated_constants_markdown(md) == "| a | b |\n|---|---|\n| 1 | 2 |"
    md.write_text("# nothing\n")
    assert acc.calibrated_constants_markdown(md) is None
    assert acc.calibrated_constants_markdown(tmp_path / "missing.md") is None


def test_step_time_section_is_validation_timing_compare(accuracy_page):
    """Issue 9: the time estimate against the measured H200 step and generate() times, per group and per case."""
    from validation.gpu import timing_compare
    rows = timing_compare.comparisons()
    want = timing_compare.summary(rows)
    groups = next(d.value for d in accuracy_page.dataframe if "Timed cases" in d.value.columns)
    assert set(groups["Group"]) == set(want)
    for _, row in groups.iterrows():
        assert row["Timed cases"] == want[row["Group"]]["n"]
        assert row["Median |error| %"] == round(100 * want[row["Group"]]["median_abs_error"], 1)
    for name in ("fit", "unseen (other models)"):  # issue 9's bound, on the page as computed
        assert 100 * want[name]["median_abs_error"] <= 20
    cases = next(d.value for d in accuracy_page.dataframe if "Measured (s)" in d.value.columns)
    assert len(cases) == len(rows)


def test_the_gpu_matrix_is_shown_per_stack_as_the_committed_comparison(accuracy_page):
    data = acc.load_gpu_matrix()
    shown = next(d.value for d in accuracy_page.dataframe if "Stack / implementation / kind" in d.value.columns)
    assert list(shown["Stack / implementation / kind"]) == [g["group"] for g in data["groups"]]
    everything = dict(zip(shown["Stack / implementation / kind"], shown["nvidia-smi median |error| %"]))
    assert everything["all"] == next(g["smi_median_pct"] for g in data["groups"] if g["group"] == "all")
    assert {"hf-trainer / hf / train", "ddp / hf / train", "fsdp2 / hf / train"} <= set(everything)


def test_published_stack_rows_are_shown_with_their_command(accuracy_page):
    from validation.published.stacks import compare
    shown = next(d.value for d in accuracy_page.dataframe if "Command" in d.value.columns)
    rows = compare()
    assert list(shown["Row"]) == [r.id for r in rows]
    assert list(shown["Error %"]) == [round(r.error_pct, 1) for r in rows]
    assert all(c.startswith("python -m calculator estimate") and f"--stack {r.stack}" in c
               for c, r in zip(shown["Command"], rows))
    assert {r.stack for r in rows} >= {"fsdp2", "deepspeed", "megatron"}
    assert list(shown["Figure"]).count("measured, not held to the bound") == sum(not r.comparable for r in rows)


def test_multi_gpu_step_time_section_is_the_published_throughput_comparison(accuracy_page):
    """Issue 23: the step time against published multi-GPU runs, per source, fitted and held out, every compared
    run and every run the engine cannot express with the reason."""
    from validation.published import throughput
    cases, skipped = throughput.load()
    results, refused = throughput.evaluate(cases)
    want = throughput.summary(results)
    groups = next(d.value for d in accuracy_page.dataframe if "Median error %" in d.value.columns)
    assert set(groups["Group"]) == set(want) >= {"fit", "held out", "megatron-bridge-perf-summary"}
    for _, row in groups.iterrows():
        assert row["Rows"] == want[row["Group"]][0]
        assert row["Median |error| %"] == round(want[row["Group"]][1], 1)
    runs = next(d.value for d in accuracy_page.dataframe if "Published (s)" in d.value.columns)
    assert len(runs) == len(results) and set(runs["Set"]) == {"fitted", "held out"}
    why = next(d.value for d in accuracy_page.dataframe if "Why not compared" in d.value.columns)
    assert len(why) == len(skipped) + len(refused)

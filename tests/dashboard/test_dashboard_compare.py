"""The compare page (pages/compare.py, logic in dashboard/compare.py): scenarios are calculator links kept as
repeated `cmp` parameters; two links draw two stacked bars and a table whose deltas are the engine's numbers;
an invalid link is named in a warning with the reason; adding and removing scenarios edits the URL."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.result import COMPONENT_LABELS
from calculator.core.units import format_bytes
from calculator.core.workload import Parallelism, Workload
from dashboard import compare
from dashboard.charts import COLORS
from dashboard.safe_text import plain
from tests.app_page import plotly_array

APP = Path(__file__).resolve().parents[2] / "app.py"
PAGE = "pages/compare.py"
QWEN = load_model("qwen2.5-7b").spec
A = "model=qwen2.5-7b&seq=8192&v=1"
B = "http://localhost:8501/?model=qwen2.5-7b&seq=8192&tp=2&sp=true&zero=1&dp=4&v=1"  # a pasted full URL
EST_A = estimate(QWEN, Workload(seq_len=8192, gpu="h100-sxm"))
EST_B = estimate(QWEN, Workload(seq_len=8192, parallel=Parallelism(tp=2, sequence_parallel=True, zero=1, dp=4),
                                gpu="h100-sxm"))


def open_compare(links: list[str]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.switch_page(PAGE)
    if links:
        at.query_params["cmp"] = links
    at.run()
    assert not at.exception, at.exception
    return at


def links(at: AppTest) -> list[str]:
    v = at.query_params.get("cmp", [])
    return v if isinstance(v, list) else [v]


def bars(at: AppTest) -> dict:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return {t["name"]: (plotly_array(t["x"]), plotly_array(t["y"]), t.get("marker", {}).get("color"))
            for t in spec["data"] if t["type"] == "bar"}


def test_two_links_two_bars_and_the_engines_deltas():
    at = open_compare([A, compare.to_cmp(B)])
    assert len(at.get("plotly_chart")) == 1
    traces = bars(at)
    for comp, label in COMPONENT_LABELS.items():
        a, b = EST_A.components.get(comp, 0), EST_B.components.get(comp, 0)
        if not (a or b):
            assert label not in traces
            continue
        xs, ys, color = traces[label]
        assert len(xs) == 2  # one stacked bar per scenario
        assert ys == [x / 1e9 for x in (a, b)] or np.allclose(ys, [a / 1e9, b / 1e9])
        assert color == COLORS[comp]
    rows = {r["Component"]: r for r in at.dataframe[0].value.to_dict("records")}
    delta_col = "Δ 2 vs 1"
    total = rows["Total per GPU"]
    assert format_bytes(EST_A.total_bytes) in total.values() and format_bytes(EST_B.total_bytes) in total.values()
    assert total[delta_col] == compare.signed(EST_B.total_bytes - EST_A.total_bytes, "GB")
    assert total[delta_col].startswith("−")  # sharding over 8 GPUs saves memory
    for comp, label in COMPONENT_LABELS.items():
        if label in rows:
            d = EST_B.components.get(comp, 0) - EST_A.components.get(comp, 0)
            assert rows[label][delta_col] == compare.signed(d, "GB"), label
    assert not at.warning


def test_an_invalid_link_is_named_with_the_reason():
    at = open_compare([A, "model=qwen2.5-7b&tp=abc", "hello world", compare.to_cmp(B)])
    texts = [plain(w.value) for w in at.warning]
    assert any("Scenario 2" in t and "tp=abc" in t and "not a number" in t for t in texts), texts
    assert any("Scenario 3" in t and "not a calculator link" in t for t in texts), texts
    traces = bars(at)
    assert all(len(x) == 2 for x, _, _ in traces.values())  # only the two valid ones are drawn
    assert "Δ 4 vs 1" in at.dataframe[0].value.columns


def test_a_link_the_engine_refuses_is_named():
    at = open_compare([A, "model=qwen2.5-7b&tp=3"])
    assert any("Scenario 2" in w.value and "cannot estimate" in w.value for w in at.warning)
    assert not at.get("plotly_chart")
    assert any("at least 2" in i.value for i in at.info)


def test_empty_page_asks_for_links():
    at = open_compare([])
    assert not at.get("plotly_chart") and any("at least 2" in i.value for i in at.info)


def test_paste_add_and_remove_edit_the_url():
    at = open_compare([A])
    at.text_input(key="_cmp_paste").input(B)
    at.button[0].click().run()  # "Add link"
    assert not at.exception
    assert links(at) == [A, compare.to_cmp(B)]
    assert len(bars(at)[COMPONENT_LABELS["weights"]][0]) == 2
    at.button(key="_cmp_remove_0").click().run()
    assert links(at) == [compare.to_cmp(B)]


def test_add_current_view_takes_the_calculators_inputs():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["model"] = "qwen2.5-7b"
    at.query_params["seq"] = "8192"
    at.run()
    at.switch_page(PAGE).run()
    at.button[1].click().run()  # "Add current view"
    assert links(at) == ["model=qwen2.5-7b&seq=8192&v=1"]
    at.button[1].click().run()
    assert len(at.get("plotly_chart")) == 1
    rows = {r["Component"]: r for r in at.dataframe[0].value.to_dict("records")}
    assert rows["Total per GPU"]["Δ 2 vs 1"] == "±0"


def test_figure_is_valid_plotly():
    scs = compare.scenarios([A, B])
    assert all(s.ok for s in scs)
    go.Figure(compare.figure(scs).to_dict())  # validates every property


def test_to_cmp_accepts_urls_and_query_strings():
    assert compare.to_cmp(" http://h/?a=1&b=2#x ") == "a=1&b=2"
    assert compare.to_cmp("?a=1") == "a=1" and compare.to_cmp("a=1") == "a=1"


def test_links_are_bounded_in_length_and_count():
    long_link = "model=qwen2.5-7b&cfg=" + "x" * (compare.MAX_LINK_CHARS + 1)
    sc = compare.scenario(1, long_link)
    assert not sc.ok and "characters long" in sc.problem and len(sc.raw) < 300
    at = open_compare([A] * 50 + [long_link])
    assert any("has 51 scenarios: only the first 4" in plain(w.value) for w in at.warning)
    assert len(bars(at)[COMPONENT_LABELS["weights"]][0]) == compare.MAX_SCENARIOS
    at = open_compare([A, long_link])
    assert any("Scenario 2" in plain(w.value) and "characters long" in plain(w.value) for w in at.warning)


def test_time_and_cost_of_each_scenario_are_the_engines():
    """The second table: each scenario's step time, tokens/s, MFU and cost (its own price key) from estimate_time."""
    from calculator.timing.step_time import estimate_time
    from calculator.timing.inputs import TimingInputs
    from dashboard.views.timing import format_seconds
    at = open_compare([A + "&price=2.5", compare.to_cmp(B) + "&price=2.5"])
    rows = {r["Time and cost"]: r for r in at.dataframe[1].value.to_dict("records")}
    inputs = TimingInputs(price_per_gpu_hour=2.5)
    ta = estimate_time(QWEN, Workload(seq_len=8192, gpu="h100-sxm"), inputs)
    tb = estimate_time(QWEN, Workload(seq_len=8192, parallel=Parallelism(tp=2, sequence_parallel=True, zero=1, dp=4),
                                      gpu="h100-sxm"), inputs)
    assert list(rows["Step / inference batch time"].values())[1:] == [format_seconds(ta.step_time_s), format_seconds(tb.step_time_s)]
    assert list(rows["Tokens/s (all GPUs)"].values())[1:] == [f"{ta.tokens_per_s:,.0f}", f"{tb.tokens_per_s:,.0f}"]
    assert list(rows["Cost per million tokens"].values())[1:] == [f"${t.cost_per_million_tokens:,.4f}"
                                                                  for t in (ta, tb)]
    assert tb.tokens_per_s > ta.tokens_per_s  # eight GPUs against one


def test_labels_say_what_differs_and_the_offload_note_appears():
    """Issue 24: the second scenario adds CPU offload, FSDP2 and Liger; its label says so (not a fixed description
    that reads as the first one's), and a note says the time model leaves CPU offload's cost out."""
    c = "model=qwen2.5-7b&seq=8192&offo=true&stack=fsdp2&impl=liger&zero=3&dp=2&v=1"
    at = open_compare([A, c])
    xs = bars(at)[COMPONENT_LABELS["weights"]][0]
    assert len(set(xs)) == 2
    second = [x for x in xs if x.startswith("2:")][0].replace("<br>", " ")
    for words in ("CPU offload", "FSDP2", "Liger", "ZeRO-3", "DP2"):
        assert words in second, second
    columns = list(at.dataframe[0].value.columns)
    assert len(set(columns)) == len(columns) and any("CPU offload" in c for c in columns)
    notes = [plain(i.value) for i in at.info]
    assert any("Scenario 2" in n and "time model leaves out CPU offload" in n for n in notes), notes
    at = open_compare([A, compare.to_cmp(B)])  # no offload: no note
    assert not any("offload" in plain(i.value) for i in at.info)


def test_labels_differ_whenever_inputs_differ():
    """For each input, a second scenario that changes only it gets a label of its own, naming the change."""
    base = {**compare.state.DEFAULTS}
    for p in compare.state.PARAMS:
        if p.group == "display":
            continue
        other = {"bool": lambda: not p.default, "int": lambda: (p.default or 0) + 1,
                 "float": lambda: (p.default or 0.5) / 2, "text": lambda: "x",
                 "choice": lambda: next(o for o in compare.state.options(p.key) if o != p.default)}[p.kind]()
        names = compare.labels([base, {**base, p.key: other}, base], [1, 2, 3])
        assert len(set(names[:2])) == 2 and names[2] == "3: same inputs as 1", (p.key, names)
        assert names[1] != "2: " and compare.phrase(p.key, other) in names[1]
    two = compare.labels([base, {**base, "offo": True, "stack": "fsdp2"}, {**base, "offo": True, "stack": "ddp"}],
                         [1, 2, 3])
    assert len(set(n.split(": ", 1)[1] for n in two)) == 3

"""The dashboard in Streamlit's AppTest (in-process, no browser): links seed the widgets; bad links are reported;
invalid combinations are explained next to their widget and show no numbers; any link renders, and numbers only
ever come from inputs the engine accepts; an engine failure is an error, not a crash or a number.

The expected values are built here from the engine's own API (ModelSpec / Workload / presets), not through
dashboard.inputs.state, so a wrong mapping from widgets to the engine fails these tests.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as hs

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.workload import RECIPES, Overheads, Parallelism, Workload
from dashboard.inputs import state as _state
from dashboard.safe_text import plain
from tests.app_page import GPU, LLAMA, assert_shows, run


def test_link_seeds_every_widget_group():
    query = {"model": "llama-3.1-70b", "mode": "train", "recipe": "megatron", "dopt": "true", "tp": "4",
             "sp": "true", "pp": "2", "dp": "4", "rc": "selective", "seq": "8192", "mbs": "2", "frag": "7.5",
             "gpu": "h200", "unit": "GiB", "v": "1"}
    at = run(query)
    assert at.selectbox(key="model").value == "llama-3.1-70b"
    assert at.selectbox(key="recipe").value == "megatron"
    assert at.checkbox(key="dopt").value is True and at.checkbox(key="sp").value is True
    assert at.number_input(key="tp").value == 4 and at.number_input(key="pp").value == 2
    assert at.number_input(key="seq").value == 8192 and at.slider(key="mbs").value == 2
    assert at.number_input(key="frag").value == 7.5 and at.selectbox(key="gpu").value == "h200"
    assert at.radio(key="rc").value == "selective" and at.radio(key="unit").value == "GiB"
    expected = estimate(load_model("llama-3.1-70b").spec, Workload(
        precision=RECIPES["megatron"][1], recompute="selective", seq_len=8192, micro_batch=2,
        parallel=Parallelism(tp=4, sequence_parallel=True, pp=2, dp=4, distributed_optimizer=True),
        overheads=Overheads(fragmentation_pct=7.5), gpu="h200"))
    assert_shows(at, expected, unit="GiB")
    assert not at.warning


def test_invalid_link_values_are_listed_in_a_warning_and_ignored():
    at = run({"tp": "abc", "mbs": "100000", "gpu": "h900", "colour": "red", "opt": "adam9", "seq": "8192",
              "dp": "inf"})
    assert len(at.warning) == 1
    text = plain(at.warning[0].value)  # the values are shown escaped (dashboard.safe_text)
    for needle in ("Tensor parallel (TP) (tp=abc): not a number; the default (1) is used and shown — enter a whole "
                   "number from 1 to 4,096", "Micro-batch size (mbs=100000): outside 1–256", "GPU (gpu=h900):",
                   "colour=red: unknown parameter", "Optimizer (opt=adam9): not one of adamw,",
                   "Data parallel (DP) (dp=inf):"):  # each names the field, the value, and what is used instead
        assert needle in text
    assert "seq" not in text  # the valid one is used, not reported
    assert at.number_input(key="tp").value == 1 and at.selectbox(key="gpu").value == GPU
    assert_shows(at, estimate(LLAMA, Workload(seq_len=8192, gpu=GPU)))
    assert "colour" not in at.query_params and "dp" not in at.query_params
    at.button(key="_dismiss_link").click().run()
    assert not at.warning


def _siblings_of(node, key):
    """The children of the block that directly holds the widget `key`."""
    kids = list(getattr(node, "children", {}).values())
    for kid in kids:
        if getattr(kid, "key", None) == key and type(kid).__name__ != "Block":
            return kids
        found = _siblings_of(kid, key)
        if found:
            return found
    return None


@pytest.mark.parametrize("query, key, words", [
    ({"tp": "3"}, "tp", "num_attention_heads"),
    ({"pp": "2", "sched": "interleaved"}, "vpp", "virtual_stages"),
    ({"model": "custom", "heads": "32", "kvh": "5"}, "heads", "multiple of num_key_value_heads"),
    ({"model": "config", "cfg": "{broken"}, "cfg", "not valid JSON"),
    ({"model": "custom", "h": "4096", "heads": "3", "kvh": "3"}, "h", "divisible by num_attention_heads"),
])
def test_invalid_combination_is_explained_next_to_its_widget_and_shows_no_numbers(query, key, words):
    at = run(query)
    assert not at.metric and not at.get("plotly_chart") and not at.get("arrow_data_frame") and not at.table
    assert not at.get("html")  # no fit cards, no breakdown table
    assert not [b for b in at.get("download_button")]
    siblings = _siblings_of(at.sidebar, key)
    assert siblings is not None
    i = next(i for i, el in enumerate(siblings) if getattr(el, "key", None) == key)
    after = siblings[i + 1]
    assert type(after).__name__ == "Error" and words in plain(after.value)
    assert any(words in plain(e.value) for e in at.main.get("error")), "summary in the main area too"


def test_fixing_the_input_brings_the_numbers_back():
    at = run({"tp": "3"})
    assert not at.metric
    at.number_input(key="tp").set_value(2).run()
    assert_shows(at, estimate(LLAMA, Workload(parallel=Parallelism(tp=2), gpu=GPU)))


# ---- robustness: any link renders, and numbers only ever come from inputs the engine accepts -------------------
def _raw_values(p):
    good = {"int": hs.integers(int(p.lo or 0), int(min(p.hi or 10**6, 10**6))).map(str),
            "float": hs.floats(p.lo or 0, p.hi or 100).map(lambda f: f"{f:.1f}"),
            "bool": hs.sampled_from(["true", "false"]),
            "choice": hs.sampled_from(_state.options(p.key) or ("x",)),
            "text": hs.sampled_from(["", "{}", '{"model_type": "llama"}'])}[p.kind]
    bad = hs.sampled_from(["", "-1", "abc", "1e99", "2.5", "nan", "inf", "-1e400", " 3"])
    return hs.one_of(good, good, bad)


_KEYS = [p for p in _state.PARAMS if p.key not in ("cfg",)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example is a page run
@given(hs.lists(hs.sampled_from(_KEYS), min_size=1, max_size=6, unique_by=lambda p: p.key).flatmap(
    lambda ps: hs.fixed_dictionaries({p.key: _raw_values(p) for p in ps})))
def test_any_link_renders_and_numbers_only_come_from_valid_inputs(query):
    at = run(query)  # asserts no exception
    link = _state.check_query_params(query)
    values = {**_state.DEFAULTS, **link.values}
    try:
        expected = _state.compute(values).estimate
    except _state.InputProblems:
        assert not at.metric and not at.get("plotly_chart")
        assert at.error
    else:
        assert_shows(at, expected, unit=values["unit"])


def test_an_engine_failure_shows_an_error_not_a_crash_or_a_number(monkeypatch):
    import calculator

    def broken(model, workload):
        raise RuntimeError("boom")
    monkeypatch.setattr(calculator, "estimate", broken)
    at = run()
    assert not at.metric and not at.get("plotly_chart")
    assert any("engine failed" in plain(e.value) and "boom" in plain(e.value) for e in at.error)


def test_a_preset_whose_layers_differ_in_width_renders_the_engine_s_numbers():
    """Nemotron-NAS (per-layer MLP widths, attention-free layers) through a link: the page shows estimate()'s."""
    at = run({"model": "llama-3.3-nemotron-super-49b", "gpu": "h200", "tp": "8", "seq": "4096"})
    assert not at.exception and not at.error
    expected = estimate(load_model("llama-3.3-nemotron-super-49b").spec,
                        Workload(seq_len=4096, gpu="h200", parallel=Parallelism(tp=8)))
    assert_shows(at, expected)

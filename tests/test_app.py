"""The dashboard in Streamlit's AppTest (in-process, no browser): every page renders; each widget group moves
the numbers exactly as a direct `calculator.estimate()` call with the same inputs says; links seed the widgets;
bad links are reported; invalid combinations are explained next to their widget and show no numbers.

The expected values are built here from the engine's own API (ModelSpec / Workload / presets), not through
dashboard.state, so a wrong mapping from widgets to the engine fails these tests.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model import GenericModel, ModelSpec
from calculator.presets import load_model
from calculator.sources import SOURCES
from calculator.units import format_bytes
from calculator.workload import RECIPES, Overheads, Parallelism, Precision, Workload
from dashboard.safe_text import plain

APP = Path(__file__).resolve().parents[1] / "app.py"
GPU = "h100-sxm"  # the page's default GPU
LLAMA = load_model("llama-3.1-8b").spec  # the page's default model


def run(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def table_bytes(at: AppTest) -> list[int]:
    """The breakdown table's bytes per term; its last row is the total (checked against the terms' sum)."""
    tables = [d.value for d in at.table if "Bytes" in d.value.columns]
    assert len(tables) == 1
    rows = [int(b) for b in tables[0]["Bytes"]]
    assert tables[0]["Component"].iloc[-1] == "Total" and rows[-1] == sum(rows[:-1])
    return rows[:-1]


def chart(at: AppTest) -> dict:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)

    def arr(v):
        if isinstance(v, dict) and "bdata" in v:
            return np.frombuffer(base64.b64decode(v["bdata"]), v["dtype"]).tolist()
        return v
    return {"x": arr(spec["data"][0]["x"]), "traces": {t["name"]: arr(t["y"]) for t in spec["data"]},
            "layout": spec["layout"]}


def assert_shows(at: AppTest, expected, unit: str = "GB") -> None:
    """The page's headline and every table row are the engine's numbers for these inputs."""
    m = metrics(at)
    assert m["Total per GPU"] == format_bytes(expected.total_bytes, unit)
    assert m["Peak allocated"] == format_bytes(expected.peak_allocated_bytes, unit)
    assert table_bytes(at) == [t.bytes for t in expected.terms]


BASE = estimate(LLAMA, Workload(gpu=GPU))


def test_default_view_is_the_engine_default():
    at = run()
    assert_shows(at, BASE)
    assert at.query_params["v"] == "1"
    assert not at.warning
    fig = chart(at)
    assert "GB = 10⁹ bytes" in fig["layout"]["yaxis"]["title"]["text"]
    assert fig["layout"]["barmode"] == "stack"


# (widget kind, key, value, expected model, expected workload): one or more per sidebar group.
CUSTOM = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
              intermediate_size=8192, vocab_size=32000)
CASES = {
    "model preset": ([("selectbox", "model", "qwen3-8b")], load_model("qwen3-8b").spec, Workload(gpu=GPU)),
    "mode": ([("radio", "mode", "infer")], LLAMA, Workload(mode="infer", gpu=GPU)),
    "precision recipe": ([("selectbox", "recipe", "megatron")], LLAMA,
                         Workload(precision=RECIPES["megatron"][1], gpu=GPU)),
    "per-tensor dtypes": ([("selectbox", "recipe", "custom"), ("selectbox", "mdt", "none"),
                           ("selectbox", "odt", "bf16")], LLAMA,
                          Workload(precision=Precision(master_weights=None, optimizer_states="bf16"), gpu=GPU)),
    "optimizer": ([("selectbox", "opt", "adafactor"), ("selectbox", "oimpl", "foreach")], LLAMA,
                  Workload(optimizer="adafactor", optimizer_impl="foreach", gpu=GPU)),
    "recompute": ([("radio", "rc", "selective")], LLAMA, Workload(recompute="selective", gpu=GPU)),
    "attention": ([("radio", "attn", "eager")], LLAMA, Workload(attention="eager", gpu=GPU)),
    "model implementation": ([("selectbox", "impl", "liger")], LLAMA, Workload(impl="liger", gpu=GPU)),
    "activation model": ([("radio", "act", "textbook"), ("number_input", "tbo", 15.0)], LLAMA,
                         Workload(activation_model="textbook", overheads=Overheads(textbook_overhead_pct=15.0),
                                  gpu=GPU)),
    "zero": ([("radio", "zero", "3"), ("number_input", "dp", 8)], LLAMA,
             Workload(parallel=Parallelism(zero=3, dp=8), gpu=GPU)),
    "tensor + sequence parallel": ([("number_input", "tp", 2), ("checkbox", "sp", True)], LLAMA,
                                   Workload(parallel=Parallelism(tp=2, sequence_parallel=True), gpu=GPU)),
    "pipeline": ([("number_input", "pp", 4), ("radio", "sched", "interleaved"), ("number_input", "vpp", 2),
                  ("number_input", "mb", 8)], LLAMA,
                 Workload(parallel=Parallelism(pp=4, schedule="interleaved", virtual_stages=2, num_microbatches=8),
                          gpu=GPU)),
    "context parallel": ([("number_input", "cp", 2)], LLAMA, Workload(parallel=Parallelism(cp=2), gpu=GPU)),
    "distributed optimizer": ([("checkbox", "dopt", True), ("number_input", "dp", 4)], LLAMA,
                              Workload(parallel=Parallelism(distributed_optimizer=True, dp=4), gpu=GPU)),
    "batch": ([("slider", "mbs", 4)], LLAMA, Workload(micro_batch=4, gpu=GPU)),
    "sequence": ([("number_input", "seq", 8192)], LLAMA, Workload(seq_len=8192, gpu=GPU)),
    "inference inputs": ([("radio", "mode", "infer"), ("number_input", "gen", 1024), ("selectbox", "kvdt", "fp8"),
                          ("selectbox", "wdt", "int4"), ("number_input", "qgs", 64)], LLAMA,
                         Workload(mode="infer", gen_tokens=1024, kv_dtype="fp8", weight_dtype="int4",
                                  quant_group_size=64, gpu=GPU)),
    "overheads": ([("number_input", "frag", 10.0), ("number_input", "ctx", 700), ("number_input", "nccl", 250),
                   ("number_input", "dp", 2)], LLAMA,
                  Workload(parallel=Parallelism(dp=2), overheads=Overheads(
                      fragmentation_pct=10.0, cuda_context_bytes=700_000_000, nccl_bytes_per_group=250_000_000),
                      gpu=GPU)),
    # training replays the caching allocator (calculator/allocator.py); the two shares apply where none is replayed
    "calibrated fragmentation": ([("radio", "mode", "infer"), ("number_input", "fst", 5.0),
                                  ("number_input", "fwk", 30.0)], LLAMA,
                                 Workload(mode="infer", overheads=Overheads(fragmentation_states_pct=5.0,
                                                                            fragmentation_working_pct=30.0), gpu=GPU)),
    "lora": ([("radio", "ft", "qlora"), ("number_input", "lr", 64), ("selectbox", "lt", "attention"),
              ("selectbox", "lad", "params")], LLAMA,
             Workload(finetune="qlora", lora_rank=64, lora_targets="attention", lora_adapter_dtype="params",
                      gpu=GPU)),
    "quantized checkpoint": ([("radio", "mode", "infer"), ("selectbox", "wdt", "int4"), ("selectbox", "qm", "gptq")],
                             LLAMA, Workload(mode="infer", weight_dtype="int4", quant_method="gptq", gpu=GPU)),
    "gpu": ([("selectbox", "gpu", "a100-40gb")], LLAMA, Workload(gpu="a100-40gb")),
    "custom architecture": ([("selectbox", "model", "custom")] + [
        ("number_input", k, v) for k, v in (("h", 2048), ("layers", 16), ("heads", 16), ("kvh", 4),
                                            ("ffn", 8192), ("vocab", 32000))],
        ModelSpec(name="custom", **CUSTOM), Workload(gpu=GPU)),
    "generic network": ([("selectbox", "model", "generic"), ("number_input", "gparams", 7_000_000_000),
                         ("number_input", "gact", 50_000_000)],
                        GenericModel(total_params=7_000_000_000, activation_elements_per_sample=50_000_000),
                        Workload(gpu=GPU)),
    "moe with expert parallel": ([("selectbox", "model", "qwen3-30b-a3b"), ("number_input", "dp", 8),
                                  ("number_input", "ep", 8)], load_model("qwen3-30b-a3b").spec,
                                 Workload(parallel=Parallelism(dp=8, ep=8), gpu=GPU)),
}


def _set(at: AppTest, kind: str, key: str, value) -> None:
    from dashboard.lazy import SECTION_OF, open_key
    if key in SECTION_OF and not any(w.key == key for w in at.get(kind)):
        at.session_state[open_key(SECTION_OF[key])] = True  # the person opens the section that holds it
        at.run()
    widget = getattr(at, kind)(key=key)
    if kind == "selectbox" or kind == "radio":
        widget.set_value(value)
    elif kind == "checkbox":
        widget.check() if value else widget.uncheck()
    else:
        widget.set_value(value)
    at.run()
    assert not at.exception, at.exception


@pytest.mark.parametrize("case", list(CASES))
def test_each_widget_group_moves_the_numbers_as_the_engine_says(case):
    steps, model, workload = CASES[case]
    at = run()
    for kind, key, value in steps:
        _set(at, kind, key, value)
    expected = estimate(model, workload)
    assert expected.total_bytes != BASE.total_bytes or expected.terms != BASE.terms
    assert_shows(at, expected)
    assert not at.error


def test_pipeline_parallel_draws_one_bar_per_stage():
    at = run({"pp": "4", "mb": "8"})
    expected = estimate(LLAMA, Workload(parallel=Parallelism(pp=4, num_microbatches=8), gpu=GPU))
    fig = chart(at)
    assert len(fig["x"]) == 4 and all(x.startswith("stage") for x in fig["x"])
    weights = fig["traces"]["Weights"]
    assert weights == pytest.approx([s.components["weights"] / 1e9 for s in expected.stages])


def test_units_switch_to_gib_and_say_so():
    at = run()
    at.radio(key="unit").set_value("GiB").run()
    assert_shows(at, BASE, unit="GiB")
    assert "GiB = 2³⁰ bytes" in chart(at)["layout"]["yaxis"]["title"]["text"]


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


def test_named_recipe_shows_its_dtypes_in_the_disabled_fields():
    at = run({"recipe": "megatron"})
    assert not [w for w in at.selectbox if w.key == "gdt"]  # a named recipe: the section is closed, not drawn
    from dashboard.lazy import open_key
    at.session_state[open_key("dtypes")] = True  # opened
    at.run()
    assert at.selectbox(key="gdt").value == RECIPES["megatron"][1].grads
    assert at.selectbox(key="gdt").disabled


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


def test_example_scenarios_load_through_the_widgets():
    from dashboard.scenarios import SCENARIOS
    from dashboard.state import build_model, build_workload, reset_values
    at = run()
    for sc in SCENARIOS:
        at.button(key=f"_scenario_{sc.id}").click().run()
        assert not at.exception
        for key, value in sc.values.items():
            widget = next(w for w in at.sidebar.get(_kind(value, key)) if w.key == key)
            assert widget.value == value, (sc.id, key)
        values = reset_values(sc.values)
        assert_shows(at, estimate(build_model(values)[0], build_workload(values)))


def _kind(value, key):
    from dashboard.state import BY_KEY
    from dashboard.widgets import RADIOS, SLIDERS
    p = BY_KEY[key]
    if p.kind == "bool":
        return "checkbox"
    if key in SLIDERS:
        return "slider"
    if p.kind == "choice":
        return "radio" if key in RADIOS else "selectbox"
    return "number_input"


def test_edit_preset_as_custom_copies_the_architecture():
    at = run({"model": "qwen2.5-7b"})
    before = metrics(at)["Total per GPU"]
    assert not [w for w in at.number_input if w.key == "h"]  # a preset: the custom fields are not drawn
    at.sidebar.button[0].click().run()
    assert at.selectbox(key="model").value == "custom"
    assert not at.number_input(key="h").disabled
    assert at.number_input(key="h").value == load_model("qwen2.5-7b").spec.hidden_size
    assert metrics(at)["Total per GPU"] == before


def test_a_preset_the_custom_fields_cannot_describe_is_edited_as_its_config():
    at = run({"model": "qwen3-8b"})  # QK-norm: not one of the custom fields
    before = metrics(at)["Total per GPU"]
    at.sidebar.button[0].click().run()
    assert at.selectbox(key="model").value == "config"
    assert json.loads(at.text_area(key="cfg").value) == load_model("qwen3-8b").raw
    assert metrics(at)["Total per GPU"] == before


def test_pasting_a_config_switches_to_it():
    cfg = json.dumps({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 8,
                      "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 4096,
                      "vocab_size": 32000})
    at = run()
    at.text_area(key="cfg").input(cfg).run()
    assert at.selectbox(key="model").value == "config"
    from calculator.hf_config import spec_from_hf_config
    assert_shows(at, estimate(spec_from_hf_config(json.loads(cfg)).spec, Workload(gpu=GPU)))


def test_fit_cards_cover_the_headline_gpus():
    at = run()
    from calculator.hardware import FIT_CARD_GPUS
    for gpu in ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x"):
        assert gpu in FIT_CARD_GPUS
        fit = next(f for f in BASE.fits if f.gpu == gpu)
        texts = " ".join(m.value for m in at.markdown)
        assert f"**{fit.name}**" in texts and fit.verdict in texts


def test_formula_panel_shows_every_term_with_its_source_link():
    at = run()
    from dashboard.result_view import FORMULAS_OPEN
    assert not any("`= " in m.value for m in at.markdown)  # built only while open
    at.session_state[FORMULAS_OPEN] = True  # opened
    at.run()
    texts = "\n".join(m.value for m in at.markdown)
    for t in BASE.terms:
        assert f"`{t.formula}`" in texts and f"`= {t.substituted}`" in texts
        assert f"({SOURCES[t.source].url})" in texts


def test_exports_are_offered():
    at = run()
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Breakdown CSV", "Breakdown JSON", "One-page PDF report"]


@pytest.mark.parametrize("page", ["pages/formulas.py", "pages/about.py"])
def test_other_pages_render(page):
    at = run()
    at.switch_page(page).run()
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    if page.endswith("formulas.py"):
        for src in SOURCES.values():
            assert src.title in text
    else:
        assert "What is not modelled" in [h.value for h in at.subheader] or "not modelled" in text


@pytest.mark.parametrize("page, title", [("pages/planner.py", "Parallel layout planner"),
                                         ("pages/compare.py", "Compare scenarios")])
def test_planner_and_compare_pages_are_registered_and_render(page, title):
    at = run()
    at.switch_page(page).run()
    assert not at.exception
    assert [t.value for t in at.title] == [title]


# ---- robustness: any link renders, and numbers only ever come from inputs the engine accepts -------------------
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as hs  # noqa: E402

from dashboard import state as _state  # noqa: E402


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

"""The dashboard in Streamlit's AppTest (in-process, no browser): the default page is the engine's default, and each
widget group moves the numbers exactly as a direct `calculator.stages.estimate()` call with the same inputs says; example
scenarios, editing a preset and pasting a config go through the same widgets.

The expected values are built here from the engine's own API (ModelSpec / Workload / presets), not through
dashboard.inputs.state, so a wrong mapping from widgets to the engine fails these tests.
"""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.spec import GenericModel, ModelSpec
from calculator.model.presets import load_model
from calculator.core.workload import RECIPES, Overheads, Parallelism, Precision, Workload
from tests.app_page import BASE, GPU, LLAMA, assert_shows, chart, metrics, run


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
    # training replays the caching allocator (calculator/allocator/reference.py); the two shares apply where none is replayed
    "calibrated fragmentation": ([("radio", "mode", "infer"), ("number_input", "fst", 5.0),
                                  ("number_input", "fwk", 30.0)], LLAMA,
                                 Workload(mode="infer", overheads=Overheads(fragmentation_states_pct=5.0,
                                                                            fragmentation_working_pct=30.0), gpu=GPU)),
    "lora": ([("radio", "ft", "qlora"), ("number_input", "lr", 64), ("selectbox", "lt", "attention"),
              ("selectbox", "lad", "params")], LLAMA,
             # picking QLoRA on the page turns recompute to full, as PEFT's and TRL's examples run it
             Workload(finetune="qlora", lora_rank=64, lora_targets="attention", lora_adapter_dtype="params",
                      recompute="full", gpu=GPU)),
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
    from dashboard.inputs.lazy import SECTION_OF, open_key
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
    assert len(fig["x"]) == 4 and all(x.startswith("stage") for x in fig["x"])  # each stage at its own peak
    weights = fig["traces"]["Weights"]
    assert weights == pytest.approx([s.components["weights"] / 1e9 for s in expected.stages])


def test_units_switch_to_gib_and_say_so():
    at = run()
    at.radio(key="unit").set_value("GiB").run()
    assert_shows(at, BASE, unit="GiB")
    assert "GiB = 2³⁰ bytes" in chart(at)["layout"]["yaxis"]["title"]["text"]


def test_named_recipe_shows_its_dtypes_in_the_disabled_fields():
    at = run({"recipe": "megatron"})
    assert not [w for w in at.selectbox if w.key == "gdt"]  # a named recipe: the section is closed, not drawn
    from dashboard.inputs.lazy import open_key
    at.session_state[open_key("dtypes")] = True  # opened
    at.run()
    assert at.selectbox(key="gdt").value == RECIPES["megatron"][1].grads
    assert at.selectbox(key="gdt").disabled


def test_example_scenarios_load_through_the_widgets():
    from dashboard.inputs.scenarios import SCENARIOS
    from dashboard.inputs.state import build_model, build_workload, reset_values
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
    from dashboard.inputs.state import BY_KEY
    from dashboard.inputs.widgets import RADIOS, SLIDERS
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
    from calculator.model.hf_config import spec_from_hf_config
    assert_shows(at, estimate(spec_from_hf_config(json.loads(cfg)).spec, Workload(gpu=GPU)))

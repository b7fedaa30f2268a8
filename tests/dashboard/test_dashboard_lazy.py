"""Sections drawn only while open (dashboard.inputs.lazy): fewer widgets per rerun, and still every input in the URL
with its own key, read from links, kept while closed."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.spec import ModelSpec
from calculator.model.presets import load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Overheads, Workload
from dashboard.inputs.lazy import LAZY_KEYS, SECTIONS, open_key
from dashboard.inputs.state import PARAMS

from tests.app_page import GPU, run


def total(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Total per GPU")


def drawn_keys(at: AppTest) -> set[str]:
    return {w.key for kind in ("number_input", "selectbox", "radio", "checkbox", "slider", "text_input",
                               "text_area") for w in at.sidebar.get(kind)}


def test_sections_partition_inputs_and_closed_ones_are_not_drawn():
    keys = [k for ks in SECTIONS.values() for k in ks]
    assert len(keys) == len(set(keys)) and set(keys) <= {p.key for p in PARAMS}
    at = run()
    drawn = drawn_keys(at)
    assert not drawn & LAZY_KEYS
    sidebar_inputs = {p.key for p in PARAMS if p.group != "display"}  # display keys live in the main area
    assert sidebar_inputs - LAZY_KEYS <= drawn  # every other input is drawn
    assert len(drawn) < len(PARAMS) / 2


def test_a_link_value_in_a_closed_section_is_used_shown_and_kept_in_the_url():
    at = run({"ctx": "700", "v": "1"})
    expected = estimate(load_model("llama-3.1-8b").spec,
                        Workload(overheads=Overheads(cuda_context_bytes=700_000_000), gpu=GPU))
    assert total(at) == format_bytes(expected.total_bytes)
    assert at.number_input(key="ctx").value == 700  # a value not at its default opens its section
    assert at.query_params["ctx"] == "700"
    at.slider(key="mbs").set_value(2).run()
    assert at.query_params["ctx"] == "700"


def test_a_closed_section_keeps_its_values_in_use_and_in_the_url():
    at = run({"model": "custom", "v": "1"})
    at.number_input(key="h").set_value(2048).run()
    at.number_input(key="ffn").set_value(8192).run()
    custom_total = total(at)
    assert at.query_params["h"] == "2048" and at.query_params["ffn"] == "8192"

    at.selectbox(key="model").set_value("qwen2.5-7b").run()  # the custom section closes: not drawn
    assert "h" not in drawn_keys(at)
    assert at.query_params["h"] == "2048", "the closed section's value stays in the link"
    assert total(at) == format_bytes(estimate(load_model("qwen2.5-7b").spec, Workload(gpu=GPU)).total_bytes)

    at.selectbox(key="model").set_value("custom").run()  # drawn again, with the kept values
    assert at.number_input(key="h").value == 2048 and at.number_input(key="ffn").value == 8192
    assert total(at) == custom_total
    spec = ModelSpec(name="custom", hidden_size=2048, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=8192, vocab_size=128256)
    assert total(at) == format_bytes(estimate(spec, Workload(gpu=GPU)).total_bytes)


def test_a_section_is_drawn_while_open_and_its_edit_keeps_it_open():
    at = run()
    assert "ctx" not in drawn_keys(at)
    at.session_state[open_key("overheads")] = True  # the person opens it
    at.run()
    assert "ctx" in drawn_keys(at) and "ctx" not in at.query_params
    at.session_state[open_key("overheads")] = False  # and closes it: nothing drawn, nothing changed
    at.run()
    assert "ctx" not in drawn_keys(at) and total(at) == format_bytes(estimate(
        load_model("llama-3.1-8b").spec, Workload(gpu=GPU)).total_bytes)
    at.session_state[open_key("overheads")] = True
    at.run()
    at.number_input(key="ctx").set_value(650).run()
    at.session_state[open_key("overheads")] = False  # a value off its default keeps the section drawn
    at.run()
    assert at.number_input(key="ctx").value == 650 and at.query_params["ctx"] == "650"


def test_megatron_flags_from_a_link_reach_the_estimate_and_open_their_section():
    """Megatron-Core's flags (FP8 recipe, MTP, MoE dispatch…) are read from the link into the Workload: the page's
    total is the engine's for the same flags, and their section is drawn because a value is not at its default."""
    link = {"v": "1", "model": "llama-3.1-8b", "stack": "megatron", "impl": "megatron-te", "tp": "2",
            "fp8": "delayed", "cef": "te", "gpu": GPU}
    at = run(link)
    assert not at.exception
    w = Workload(gpu=GPU, stack="megatron", impl="megatron-te", fp8="delayed", cross_entropy_fusion="te",
                 parallel={"tp": 2})
    assert total(at) == format_bytes(estimate(load_model("llama-3.1-8b").spec, w).total_bytes)
    plain = estimate(load_model("llama-3.1-8b").spec, Workload(gpu=GPU, stack="megatron", impl="megatron-te",
                                                                      parallel={"tp": 2}))
    assert total(at) != format_bytes(plain.total_bytes)
    assert at.selectbox(key="fp8").value == "delayed" and at.query_params["fp8"] == "delayed"


def test_megatron_optimizer_and_recompute_module_keys_reach_the_estimate():
    """pao, gbf16 and rcm (the precision-aware optimizer, bf16 gradient reduction, --recompute-modules) are read
    from the link into the Workload; a module list the engine refuses is shown under its own input."""
    base = {"v": "1", "model": "deepseek-v2-lite", "stack": "megatron", "impl": "megatron-te", "tp": "2",
            "dp": "4", "ep": "8", "etp": "1", "sp": "true", "dopt": "true", "rc": "selective", "gpu": GPU}
    at = run({**base, "pao": "true", "gbf16": "true", "rcm": "moe_act,shared_experts"})
    w = Workload(gpu=GPU, stack="megatron", impl="megatron-te", recompute="selective",
                 precision_aware_optimizer=True, grad_reduce_in_bf16=True,
                 recompute_modules=("moe_act", "shared_experts"),
                 parallel={"tp": 2, "dp": 4, "ep": 8, "etp": 1, "sequence_parallel": True,
                           "distributed_optimizer": True})
    assert total(at) == format_bytes(estimate(load_model("deepseek-v2-lite").spec, w).total_bytes)
    assert at.text_input(key="rcm").value == "moe_act,shared_experts"
    refused = run({**base, "rcm": "layernorm", "fp8": "current"})
    assert any("layernorm recompute under an FP8 recipe is not modelled" in e.value for e in refused.error)


def test_offload_modules_key_reaches_the_estimate():
    """ofm (--fine-grained-activation-offloading --offload-modules) is read from the link into the Workload."""
    base = {"v": "1", "model": "deepseek-v2-lite", "stack": "megatron", "impl": "megatron-te", "tp": "2",
            "dp": "4", "ep": "8", "etp": "1", "sp": "true", "dopt": "true", "gpu": GPU}
    at = run({**base, "ofm": "core_attn,attn_proj"})
    w = Workload(gpu=GPU, stack="megatron", impl="megatron-te", offload_modules=("core_attn", "attn_proj"),
                 parallel={"tp": 2, "dp": 4, "ep": 8, "etp": 1, "sequence_parallel": True,
                           "distributed_optimizer": True})
    assert total(at) == format_bytes(estimate(load_model("deepseek-v2-lite").spec, w).total_bytes)
    assert at.text_input(key="ofm").value == "core_attn,attn_proj"


def test_images_open_their_section_for_a_vision_model_and_reach_the_estimate():
    at = run({"v": "1", "model": "gemma-3-4b", "ft": "lora", "img": "2", "vt": "trained", "gpu": GPU})
    assert not at.exception
    w = Workload(gpu=GPU, finetune="lora", images_per_sample=2, vision_tower="trained")
    assert total(at) == format_bytes(estimate(load_model("gemma-3-4b").spec, w).total_bytes)
    assert at.number_input(key="img").value == 2 and at.query_params["img"] == "2"
    text_only = run({"v": "1", "model": "llama-3.1-8b"})
    assert "img" not in drawn_keys(text_only)  # no tower, defaults: the section stays closed

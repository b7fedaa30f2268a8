"""DeepSeek-V4 trained with its fp32-kept parameters in bf16 (CompressedSpec.fp32_kept False: how FSDP2's
MixedPrecisionPolicy and DeepSpeed's bf16 engine run them, calculator/stacks/common.py KeptDtype.casts):
architectures/compressed_saved.py's terms held to a per-module CPU trace of a tiny model whose parameters are all
bf16, and the whole step to the goldens tests/golden_stacks/deepseek-v4-tiny-cast__* (make_golden's protocol on
the plain bf16 build: validation/architectures/dsv4_stacks.py --whole)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import estimate
from calculator.model.architectures import compressed_saved as cs
from calculator.model.hf_config import spec_from_hf_config
from calculator.stacks import common, deepspeed, fsdp2

GOLDEN = Path(__file__).resolve().parents[2] / "golden_stacks"
NONE = [f"deepseek-v4-tiny-cast__train__mixed__b{b}_s128__none__eager" for b in (1, 2)]
FULL = "deepseek-v4-tiny-cast__train__mixed__b1_s128__full__eager"


def _golden(name: str):
    g = json.loads((GOLDEN / f"{name}.json").read_text())
    spec = common.model_as_run(spec_from_hf_config(g["model"]).spec, deepspeed)
    return g, spec, g["run"]["micro_batch"], g["run"]["seq_len"]


def test_fsdp2_and_deepspeed_run_the_model_with_its_fp32_kept_parameters_cast():
    """model_as_run: one copy per model with CompressedSpec.fp32_kept False, no fp32-kept parameter left."""
    g, spec, _, _ = _golden(NONE[0])
    loaded = spec_from_hf_config(g["model"]).spec
    assert loaded.compressed.fp32_kept and not spec.compressed.fp32_kept
    assert common.model_as_run(loaded, fsdp2) is common.model_as_run(loaded, deepspeed)
    assert common.fp32_kept(spec, 0, 4, True) == 0 < common.fp32_kept(loaded, 0, 4, True)


@pytest.mark.parametrize("name", NONE)
def test_each_layer_saves_what_compressed_saved_counts_for_bf16_kept_parameters(name):
    """Every layer of the whole-step trace (the last one with hc_head, as in the fp32 goldens) against layer() +
    indexer_retained() of the cast model; and the whole forward with the head and the loss."""
    g, spec, b, s = _golden(name)
    per_layer = g["details"]["activations_per_layer"]
    layers = [sum(cs.layer(spec, spec.layer_kind(i).mixer, b, s, 2))
              + cs.indexer_retained(spec, spec.layer_kind(i).mixer, b, s, 2) for i in range(4)]
    assert per_layer[:3] == layers[:3]
    assert g["measured"]["activations"] == sum(layers) + cs.head(spec, b * s, 2) + g["measured"]["loss_head"]


@pytest.mark.parametrize("name", NONE)
def test_the_backward_still_peaks_in_hc_heads_input_norm(name):
    g, spec, b, s = _golden(name)
    m = g["measured"]
    beyond = cs.hyper_head_backward(spec, b * s, 2) - cs.head(spec, b * s, 2) - m["loss_head"]
    assert abs(m["peak_fwd_bwd"] - m["activations"] - beyond) <= 16
    assert g["details"]["peak_fwd_bwd_phase"] == "backward"


@pytest.mark.parametrize("name,rel", [(NONE[0], 1e-5), (NONE[1], 1e-5), (FULL, 1e-4)])
def test_the_whole_step_peak_is_the_traced_one(name, rel):
    """The one-GPU step of the cast model (bf16 weights and gradients, fp32 master and AdamW states): the engine's
    peak against the traced one less the model's buffers (not modelled): 8 B short, 8 B short, -0.008 %."""
    from validation.trace.compare import workload_for
    g, spec, _, _ = _golden(name)
    est = estimate(spec, workload_for(g), with_fits=False)
    traced = g["measured"]["peak_allocated"] - g["details"]["buffers"]
    assert est.peak_allocated_bytes == pytest.approx(traced, rel=rel)
    assert est.components["weights"] == g["measured"]["weights"] == 2 * 5_189_501


def test_bf16_kept_parameters_save_copies_of_the_hyper_connection_weights_and_a_bf16_sink_softmax():
    """A per-module CPU trace (validation/trace/saved_by_module.py) of a tiny model with every parameter bf16 against
    compressed_saved: each hyper-connection keeps F.linear's fp32 copy of fn, hc_head its hc_fn and hc_scale copies,
    the attention a bf16 softmax over [scores | sinks] and no separate cast."""
    torch = pytest.importorskip("torch")
    from tests.model.mappers.test_dsa import V4_A, written
    from validation.architectures.measure import tiny_bf16
    from validation.trace.saved_by_module import saved_bytes_by_module
    torch.set_num_threads(1)
    cfg, config = written("deepseek_v4", **V4_A)
    spec = common.model_as_run(spec_from_hf_config(cfg).spec, fsdp2)
    model = tiny_bf16(config, "eager")
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    b, s = 2, 16
    by_module = saved_bytes_by_module(model, torch.randint(3, 100, (b, s)))
    for i in range(spec.num_hidden_layers):
        prefix = f"model.layers.{i}"
        traced = sum(v for k, v in by_module.items() if k == prefix or k.startswith(prefix + "."))
        assert traced == sum(cs.layer(spec, spec.layer_kind(i).mixer, b, s, 2)), i
    assert by_module["model.hc_head.input_norm"] + by_module["model.hc_head"] == cs.hyper_head(spec, b * s, 2)

"""DeepSeek-V4 training (transformers 5.23 models/deepseek_v4/modeling_deepseek_v4.py) term by term: each step-level
term of architectures/compressed_saved.py and calculator/stages/held.py held to the goldens
tests/golden/deepseek-v4-tiny__* (a real training step traced by validation/architectures/dsv4_golden.py, whose whole
peak tests/validation/test_golden.py compares) or to a CPU trace per module; what is not validated is refused,
naming the field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import InputError, Workload, estimate
from calculator.model import architectures
from calculator.model.architectures import compressed_saved as cs
from calculator.model.hf_config import spec_from_hf_config

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
NONE = [f"deepseek-v4-tiny__train__mixed__b{b}_s{s}__none__eager" for b, s in ((1, 128), (2, 128), (1, 200))]
FULLS = [f"deepseek-v4-tiny__train__mixed__b{b}_s{s}__full__eager" for b, s in ((1, 128), (3, 72))]
FULL = FULLS[0]


def _golden(name: str):
    g = json.loads((GOLDEN / f"{name}.json").read_text())
    return g, spec_from_hf_config(g["model"]).spec, g["run"]["micro_batch"], g["run"]["seq_len"]


@pytest.mark.parametrize("name", NONE)
def test_each_layer_keeps_its_saved_tensors_and_a_csa_indexer_its_scoring_graph(name):
    """DeepseekV4DecoderLayer: what each layer's forward leaves allocated is compressed_saved.layer (held per module
    by test_deepseek_v4.py) plus, on a CSA layer, the DeepseekV4Indexer / DeepseekV4IndexerScorer graph the backward
    never reaches (indexer_retained; b > 1 adds the scorer's broadcast copy of the fp32 compressed keys). The last
    layer's allocations also hold hc_head's (see the next test)."""
    g, spec, b, s = _golden(name)
    per_layer = g["details"]["activations_per_layer"]
    for i in range(spec.num_hidden_layers - 1):
        kind = spec.layer_kind(i).mixer
        assert per_layer[i] == sum(cs.layer(spec, kind, b, s, 2)) + cs.indexer_retained(spec, kind, b, s, 2), i
    assert cs.indexer_retained(spec, "compressed_sparse", b, s, 2) > 0
    assert cs.indexer_retained(spec, "compressed_heavy", b, s, 2) == 0


@pytest.mark.parametrize("name", NONE)
def test_the_step_saves_the_layers_hc_head_the_fp32_final_norm_and_the_loss(name):
    """DeepseekV4Model.forward: the embedding expanded into hc_mult streams (layer 0's input, in its layer),
    DeepseekV4HyperHead's collapse and the fp32-weight DeepseekV4RMSNorm with the LM head's input (head), the loss's
    fp32 log-softmax (measured loss_head): every saved byte of the step."""
    g, spec, b, s = _golden(name)
    T = b * s
    layers = sum(sum(cs.layer(spec, spec.layer_kind(i).mixer, b, s, 2))
                 + cs.indexer_retained(spec, spec.layer_kind(i).mixer, b, s, 2) for i in range(4))
    assert g["measured"]["activations"] == layers + cs.head(spec, T, 2) + g["measured"]["loss_head"]
    assert cs.head(spec, T, 2) == cs.hyper_head(spec, T, 2) + cs.fp32_weight_rmsnorm(T, 256) + 2 * T * 256


def test_hc_head_saves_what_its_modules_save_on_a_cpu_trace():
    """hyper_head and the final norm against the per-module saved tensors of a tiny bf16 model on the CPU."""
    torch = pytest.importorskip("torch")
    from tests.model.mappers.test_dsa import V4_A, written
    from validation.architectures.measure import tiny_bf16
    from validation.trace.saved_by_module import saved_bytes_by_module
    torch.set_num_threads(1)
    cfg, config = written("deepseek_v4", **V4_A)
    spec = spec_from_hf_config(cfg).spec
    b, s = 2, 16
    by_module = saved_bytes_by_module(tiny_bf16(config, "eager"), torch.randint(3, 100, (b, s)))
    assert by_module["model.hc_head.input_norm"] + by_module["model.hc_head"] == cs.hyper_head(spec, b * s, 2)
    assert by_module["model.norm"] + by_module["lm_head"] == cs.head(spec, b * s, 2) - cs.hyper_head(spec, b * s, 2)


@pytest.mark.parametrize("name", NONE)
def test_the_backward_peaks_in_hc_heads_input_norm(name):
    """Without recompute the backward's peak is inside DeepseekV4HyperHead's input_norm backward, the loss and the
    head's other saved tensors freed (hyper_head_backward), above the end of the forward by that less the head's
    saved tensors (within the 8 B of the loss's scalar gradients)."""
    g, spec, b, s = _golden(name)
    m = g["measured"]
    beyond = cs.hyper_head_backward(spec, b * s, 2) - cs.head(spec, b * s, 2) - m["loss_head"]
    assert abs(m["peak_fwd_bwd"] - m["activations"] - beyond) <= 16
    assert g["details"]["peak_fwd_bwd_phase"] == "backward"


@pytest.mark.parametrize("name", FULLS)
def test_full_recompute_keeps_the_streams_the_rope_tables_and_the_mask(name):
    """GradientCheckpointingLayer keeps each DeepseekV4DecoderLayer's [b, s, hc_mult, h] input
    (checkpointed_input), the model's position_embeddings and position_ids (checkpointed_shared) and the eager
    sliding-window mask, beside the head's saved tensors."""
    g, spec, b, s = _golden(name)
    T = b * s
    kept = 4 * cs.checkpointed_input(spec, T, 2) + cs.checkpointed_shared(spec, s, 2) + 2 * b * s * s
    assert g["measured"]["activations"] == kept + cs.head(spec, T, 2) + g["measured"]["loss_head"]
    assert cs.checkpointed_input(spec, T, 2) == 2 * T * 4 * 256
    assert g["measured"]["peak_step"] > g["measured"]["peak_fwd_bwd"]  # the recomputed layer's peak is not held


@pytest.mark.parametrize("recipe,extra", [("mixed", (1, 1, 0)), ("pure-bf16", (1, 1, 2)), ("megatron", (1, 0, 0))])
def test_fp32_kept_parameters_get_fp32_weights_gradients_and_adam_states(recipe, extra):
    """DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict: N32 parameters (compressed.fp32_parameters) are fp32;
    autograd gives them fp32 gradients and AdamW fp32 states (the master's, or their own without a master): the
    bytes beyond the recipe's rule are N32 × (4 − b) per tensor — for gradients and states less the CSA indexers'
    fp32 ones (their compressor's position_bias and kv_norm), which backward never reaches, so on one GPU they get
    neither (the mixed golden's weights, gradients and AdamW states exact)."""
    from calculator.core.workload import RECIPES
    from validation.trace.compare import workload_for
    g, spec, _, _ = _golden(NONE[0])
    n32 = architectures.compressed.fp32_parameters(spec, range(4), True)
    graded = n32 - architectures.compressed.indexer_fp32_parameters(spec, range(4))
    assert graded == n32 - 2 * (4 * 2 * 32 + 32)  # two CSA layers, rate 4, index_head_dim 32
    precision = {"mixed": RECIPES["mixed-bf16"][1]}.get(recipe) or RECIPES[recipe][1]
    w = workload_for(g).model_copy(update={"precision": precision})
    terms = {t.key: t.bytes for t in estimate(spec, w, with_fits=False).stages[0].terms}
    for key, per, n in zip(("weights.fp32", "gradients.fp32", "optimizer_states.fp32"), extra, (n32, graded, graded)):
        assert terms.get(key, 0) == 2 * per * n, key
    if recipe == "mixed":
        for key in ("weights", "gradients", "optimizer_states"):
            assert g["measured"][key] == terms[key] + terms.get(key + ".fp32", 0), key


def test_the_step_does_not_upcast_gradients_that_are_fp32():
    """The optimizer step's .to(fp32) of the gradients returns an fp32-kept parameter's own: under full recompute
    the step is the peak, and the engine's is the traced one less the buffers (tid2eid, the RoPE inv_freq; not
    modelled) within 0.01 %."""
    from validation.trace.compare import workload_for
    g, spec, _, _ = _golden(FULL)
    est = estimate(spec, workload_for(g), with_fits=False)
    assert g["measured"]["peak_step"] > g["measured"]["peak_fwd_bwd"]
    traced = g["measured"]["peak_allocated"] - g["details"]["buffers"]
    assert est.peak_allocated_bytes == pytest.approx(traced, rel=1e-4)
    assert any(x.startswith("DeepSeek-V4 training: transformers' eager modules") for x in est.warnings)


@pytest.mark.parametrize("update,field", [
    ({"finetune": "lora"}, "finetune"), ({"finetune": "qlora"}, "finetune"), ({"recompute": "selective"}, "recompute"),
    ({"stack": "megatron"}, "stack"), ({"stack": "megatron", "parallel": {"dp": 2}}, "stack"),
    ({"parallel": {"pp": 2}}, "pp"),
    ({"precision": {"params": "fp32", "grads": "fp32", "master_weights": None}}, "precision"),
    ({"parallel": {"tp": 2}}, "tp"), ({"attention": "flash"}, "attention")])
def test_what_is_not_validated_is_refused_naming_the_field(update, field):
    g, spec, _, _ = _golden(NONE[0])
    with pytest.raises(InputError) as err:
        estimate(spec, Workload(mode="train", seq_len=128, **{"attention": "eager", **update}), with_fits=False)
    assert err.value.field == field


def test_peft_all_linear_lora_fails_on_the_grouped_output_projection():
    """Why LoRA is refused: PEFT wraps DeepseekV4Attention.o_a_proj (a DeepseekV4GroupedLinear, an nn.Linear applied
    per group with bmm) as a plain linear, and the all-linear model's forward fails on the CPU."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from tests.model.mappers.test_dsa import V4_A, written
    from validation.architectures.measure import tiny_bf16
    _, config = written("deepseek_v4", **V4_A)
    model = peft.get_peft_model(tiny_bf16(config, "eager"), peft.LoraConfig(r=4, target_modules="all-linear"))
    assert any(name.endswith("o_a_proj") and isinstance(mod, peft.tuners.lora.LoraLayer)
               for name, mod in model.named_modules())
    ids = torch.randint(3, 100, (1, 16))
    with pytest.raises(RuntimeError, match="must match the size"):
        model(ids, labels=ids)

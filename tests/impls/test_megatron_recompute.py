"""Megatron-Core's selective recompute by module (calculator/impls/megatron_recompute.py): what each module's
checkpoint stops keeping in one layer, against the source rule, and what the time model replays."""
import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.impls import megatron_te_core as core
from calculator.memory import activations as act
from calculator.memory import moe_dispatch as moe
from calculator.model.presets import load_model
from calculator.model.spec import LayerKind, ModelSpec
from calculator.stages.estimate import estimate
from calculator.timing.step_time import estimate_time

CORE = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048)
# a small MoE GPT with one dense first layer, a shared expert, SwiGLU, RoPE, GQA
MOE = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                intermediate_size=1024, vocab_size=1000, num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=256, shared_expert_intermediate_size=512, first_k_dense_layers=1)
DENSE, ROUTED = LayerKind("attention", "dense"), LayerKind("attention", "moe")


def _layer(kind, **kw):
    w = Workload(**CORE, **kw)
    return core.layer(MOE, w, act.dims(MOE, w), kind)


def test_the_default_list_is_core_attn_and_an_empty_list_recomputes_nothing():
    assert _layer(ROUTED, recompute="selective") == _layer(ROUTED, recompute="selective",
                                                            recompute_modules=("core_attn",))
    assert _layer(ROUTED, recompute="selective", recompute_modules=()) == _layer(ROUTED)
    assert _layer(DENSE, recompute="selective", recompute_modules=()) == _layer(DENSE)


def test_moe_act_frees_the_activation_output_fc2_kept():
    # CheckpointWithoutOutput over bias_act_func, discarded after fc2: e·R·f per MoE layer (SwiGLU: the weighted
    # fused kernel keeps only its input, so nothing else); R = T·k rows at balanced routing
    R = moe.expert_rows(2048, 2, 8, 1, 1.0, None, False)
    freed = _layer(ROUTED).mlp - _layer(ROUTED, recompute="selective", recompute_modules=("moe_act",)).mlp
    assert R == 4096 and freed == 2 * R * 256


def test_shared_experts_frees_the_shared_experts_mlp_and_moe_the_whole_layer():
    plain = _layer(ROUTED)
    shared = _layer(ROUTED, recompute="selective", recompute_modules=("shared_experts",))
    T, f = 2048, 512
    assert plain.mlp - shared.mlp == 2 * T * 2 * f + 2 * T * f  # fc1 output (gate + up), the activation output
    whole = _layer(ROUTED, recompute="selective", recompute_modules=("moe",))
    assert whole.mlp == 0 and whole.norms == plain.norms  # the checkpoint keeps its input: the norm's output


def test_mlp_keeps_only_the_dense_layers_input():
    plain = _layer(DENSE)
    mlp = _layer(DENSE, recompute="selective", recompute_modules=("mlp",))
    T, h, e = 2048, 512, 2
    ln_linear = e * T * h + 4 * T + e * T * h
    assert mlp.mlp == 0 and plain.norms - mlp.norms == ln_linear - e * T * h
    assert _layer(ROUTED, recompute="selective", recompute_modules=("mlp",)) == _layer(
        ROUTED, recompute="selective", recompute_modules=())  # MoE layers have no dense MLP


# a small MLA MoE model (the CI runs' shape, smaller): q and kv latents, one dense first layer, RMSNorm
MLA = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=1024, vocab_size=1000,
                q_lora_rank=192, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                head_dim=None, family="deepseek", model_type="deepseek_v3", num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=256, first_k_dense_layers=1, norm_type="rmsnorm")
MLA_DENSE, MLA_ROUTED = LayerKind("mla", "dense"), LayerKind("mla", "moe")


def _mla(kind, **kw):
    w = Workload(**CORE, **kw)
    return core.layer(MLA, w, act.dims(MLA, w), kind)


def test_layernorm_frees_the_output_and_statistics_of_each_norm_module():
    # TENorm modules only: MLA's input norm in every layer, the pre-MLP norm in MoE layers (the dense layer's is
    # fused into fc1); each keeps its input for the checkpoint and frees e·T·h + 4·T (RMSNorm's rsigma)
    T, h, e = 2048, 512, 2
    base = dict(recompute="selective", recompute_modules=("core_attn",))
    plus = dict(recompute="selective", recompute_modules=("core_attn", "layernorm"))
    assert _mla(MLA_ROUTED, **base).norms - _mla(MLA_ROUTED, **plus).norms == 2 * (e * T * h + 4 * T)
    assert _mla(MLA_DENSE, **base).norms - _mla(MLA_DENSE, **plus).norms == e * T * h + 4 * T
    assert _mla(MLA_ROUTED, **base).attention == _mla(MLA_ROUTED, **plus).attention
    # GQA layers fuse the input norm into linear_qkv: only the MoE pre-MLP norm is a module of its own
    gqa = _layer(ROUTED, **base).norms - _layer(ROUTED, **plus).norms
    assert gqa == e * T * h + 4 * T and _layer(DENSE, **base) == _layer(DENSE, **plus)


def test_mla_up_proj_keeps_only_the_latents():
    # the checkpoint keeps the q and kv latents (e·T·(192 + 64)); the latent norms' other saved tensors, the value's
    # copy (a·d_v: all Megatron keeps of the kv up-projection output) and the concatenated q and k (2·a·d_qk) are
    # freed
    T, e, a = 2048, 2, 8
    base = dict(recompute="selective", recompute_modules=("core_attn",))
    plus = dict(recompute="selective", recompute_modules=("core_attn", "mla_up_proj"))
    latents = sum(act.rmsnorm_saved(T, r, e) + e * T * r - e * T * r for r in (192, 64))
    freed = latents + e * T * a * 32 + 2 * e * T * a * 48
    assert _mla(MLA_ROUTED, **base).attention - _mla(MLA_ROUTED, **plus).attention == freed
    assert _mla(MLA_ROUTED, **base).norms == _mla(MLA_ROUTED, **plus).norms
    assert _layer(ROUTED, **base) == _layer(ROUTED, **plus)  # no MLA, nothing to recompute


def test_the_estimate_and_the_step_time_follow_the_modules():
    m = load_model("deepseek-v2-lite").spec
    par = {"tp": 2, "dp": 4, "ep": 8, "etp": 1, "sequence_parallel": True, "distributed_optimizer": True}
    runs = {mods: Workload(**CORE, parallel=par, recompute="selective", recompute_modules=mods)
            for mods in ((), ("moe_act",), ("moe",))}
    peak = {k: estimate(m, w, with_fits=False).peak_allocated_bytes for k, w in runs.items()}
    step = {k: estimate_time(m, w).step_time_s for k, w in runs.items()}
    assert peak[()] > peak[("moe_act",)] > peak[("moe",)]
    assert step[()] < step[("moe_act",)] < step[("moe",)]  # the replayed forward work


@pytest.mark.parametrize("update", [
    {"recompute_modules": ("moe_act",)},  # without selective granularity
    {"recompute": "selective", "recompute_modules": ("moe_act",), "moe_grouped_gemm": False},
    {"recompute": "selective", "recompute_modules": ("mla_up_proj",), "fp8": "current"},  # FP8: not modelled
    {"recompute": "selective", "recompute_modules": ("layernorm",), "fp8": "current"},
    {"recompute": "selective", "recompute_modules": ("moe_act",), "gpu": "b200", "fp8": "mxfp8"},
    {"recompute": "selective", "recompute_modules": ("moe",), "stack": "fsdp2"},
])
def test_what_megatron_refuses_is_named(update):
    with pytest.raises(InputError) as e:
        estimate(MOE, Workload(**{**CORE, **update}), with_fits=False)
    assert e.value.field == "recompute_modules"

"""Megatron-Core's fine-grained activation offloading (calculator/impls/megatron_offload.py): what each offload
group moves to the host in one layer, the 1M-element threshold, the layer kept on the GPU (the offload margin),
the host copies, and what Megatron refuses."""
import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.impls import megatron_offload as off
from calculator.impls import megatron_te_core as core
from calculator.memory import activations as act
from calculator.memory import moe_dispatch as moe
from calculator.memory.parallel import in_flight_microbatches
from calculator.model.spec import LayerKind, ModelSpec
from calculator.stages.estimate import estimate

ALL = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
CORE = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=4096, attention="eager")
# MLA + MoE, small latents: q (4096 × 192) and kv (4096 × 64) latents stay under 1,048,576 elements
MLA = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=1024, vocab_size=1000,
                q_lora_rank=192, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                head_dim=None, family="deepseek", model_type="deepseek_v3", num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=256, first_k_dense_layers=1, norm_type="rmsnorm")
GQA = ModelSpec(hidden_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                intermediate_size=1024, vocab_size=1000)
ROUTED, DENSE = LayerKind("mla", "moe"), LayerKind("attention", "dense")
T, h, e = 4096, 512, 2


def _w(**kw):
    return Workload(**{**CORE, **kw})


def _raw_and_moved(m, kind, **kw):
    w = _w(offload_modules=ALL, **kw)
    d = act.dims(m, w)
    raw = core.layer(m, w.model_copy(update={"offload_modules": ()}), d, kind)
    return raw, off.offloaded(m, w, d, kind, raw), core.layer(m, w, d, kind)


def test_each_group_moves_its_modules_saved_tensors():
    w = _w(offload_modules=ALL)
    d = act.dims(MLA, w)
    assert off.attn_norm_group(MLA, w, d) == e * T * h  # MLA's input norm is a TENorm: the layer's input
    assert off.qkv_linear_group(MLA, w, d) == (e * T * h, sum(act.rmsnorm_saved(T, r, e) + e * T * r
                                                               for r in (192, 64)))
    assert off.attn_proj_group(MLA, w, d) == e * T * 8 * 32  # 1,048,576 elements: at the threshold, moved
    R = moe.expert_rows(T, 2, 8, 1, 1.0, None, False)
    assert off.moe_groups(MLA, w, d) == (e * T * h, e * R * h + e * R * 2 * 256)  # mlp_norm; fc1 in, act in
    raw, moved, kept = _raw_and_moved(MLA, ROUTED)
    core_attn = raw.attention - off.qkv_linear_group(MLA, w, d)[1] - e * T * 8 * 32
    assert off.core_attn_group(MLA, w, d, raw.attention) == core_attn > 2 * 8 * T * T  # the scores among them
    assert moved == act.LayerActivations(2 * e * T * h + e * T * h, raw.attention, e * R * h + e * R * 512)
    assert kept == act.LayerActivations(raw.norms - moved.norms, 0, raw.mlp - moved.mlp)


def test_tensors_under_a_million_elements_stay_on_the_gpu():
    # under mla_up_proj the qkv_linear group holds the checkpoint's latents: 786,432 and 262,144 elements
    w = _w(offload_modules=ALL, recompute="selective", recompute_modules=("mla_up_proj", "layernorm"))
    d = act.dims(MLA, w)
    assert off.qkv_linear_group(MLA, w, d) == (0, 0)  # the input norm's output is already freed by layernorm
    assert off.MIN_ELEMENTS == 1024 * 1024


def test_fused_norms_are_not_offloaded_and_gqa_moves_its_fused_qkv_inputs():
    w = _w(offload_modules=ALL)
    d = act.dims(GQA, w)
    assert off.attn_norm_group(GQA, w, d) == 0  # the input norm is fused into linear_qkv (IdentityOp)
    assert off.qkv_linear_group(GQA, w, d) == (2 * e * T * h, 0)  # the input and the normalised GEMM input
    raw, moved, kept = _raw_and_moved(GQA, DENSE)
    assert moved.mlp == 0 and kept.mlp == raw.mlp  # dense TE layers: mlp_norm fused, no expert groups


def test_core_attn_recompute_leaves_the_core_on_the_gpu():
    w = _w(offload_modules=ALL, recompute="selective", recompute_modules=("core_attn",))
    d = act.dims(MLA, w)
    assert off.core_attn_group(MLA, w, d, 10**9) == 0


def test_the_stage_keeps_one_layer_and_the_host_holds_the_rest():
    par = {"pp": 2, "dp": 1, "num_microbatches": 4}
    w = _w(offload_modules=ALL, parallel=par)
    est = estimate(MLA, w, with_fits=False)
    first = est.stages[0]  # layers 0 (dense) and 1 (MoE): the margin is the stage's last layer, a MoE one
    d = act.dims(MLA, w)
    moved = {k: off.offloaded(MLA, w, d, k, core.layer(MLA, w.model_copy(update={"offload_modules": ()}), d, k))
             for k in (LayerKind("mla", "dense"), ROUTED)}
    kept = [t for t in first.terms if t.key == "activations.offload_kept"]
    assert kept and kept[0].bytes == moved[ROUTED].total
    flight = in_flight_microbatches(w.parallel, 0, MLA.num_hidden_layers)
    host = [t for t in first.host_terms if t.key == "host.offloaded_activations"][0]
    assert host.bytes == int(flight * (moved[LayerKind("mla", "dense")].total + moved[ROUTED].total)) - kept[0].bytes
    plain = estimate(MLA, _w(parallel=par), with_fits=False).stages[0]
    assert first.peak_allocated_bytes < plain.peak_allocated_bytes


@pytest.mark.parametrize("update", [
    {"offload_modules": ("attn_proj",)},  # its input is core_attn's output: only with core_attn
    {"offload_modules": ("moe_act",), "recompute": "selective", "recompute_modules": ("moe",)},
    {"offload_modules": ("core_attn",), "fp8": "current"},  # quantized inputs: not modelled
    {"offload_modules": ("core_attn",), "stack": "fsdp2", "impl": "hf"},  # a Megatron-Core input
])
def test_what_megatron_refuses_is_named(update):
    with pytest.raises(InputError) as e:
        estimate(MLA, _w(**update), with_fits=False)
    assert e.value.field == "offload_modules"


def test_an_offloading_estimate_warns_how_far_the_ci_runs_read():
    """The offload group of Megatron-LM's CI reads 4.5-7.3% above the estimate: an estimate with --offload-modules says
    so in its warnings (and on its offload-margin line), not only in docs/validation.md."""
    from calculator import Workload, estimate
    from calculator.impls.megatron_offload import UNDER_NOTE
    from calculator.model.presets import load_model
    m = load_model("deepseek-v2-lite").spec
    base = dict(stack="megatron", impl="megatron-te", seq_len=4096,
                parallel={"tp": 2, "ep": 4, "dp": 4, "distributed_optimizer": True, "sequence_parallel": True})
    est = estimate(m, Workload(**base, offload_modules=["core_attn", "attn_proj", "expert_fc1"]), with_fits=False)
    assert any(UNDER_NOTE in x for x in est.warnings)
    assert any(t.key == "activations.offload_kept" and t.note == UNDER_NOTE for t in est.stages[0].terms)
    plain = estimate(m, Workload(**base), with_fits=False)
    assert not any(UNDER_NOTE in x for x in plain.warnings)


def test_a_reloaded_core_attention_brings_the_softmax_output_back_twice():
    """fine_grained_activation_offload.py bulk_offload_group / bulk_reload_group: one pinned copy and one reloaded
    tensor per saved tag; TE's unfused attention saves its softmax output in the softmax and in the probs·V bmm
    (attention dropout 0: the dropout returns the same tensor), so it comes back twice: e·b·a·s·s_kv more."""
    w = _w(offload_modules=ALL)
    d = act.dims(MLA, w)
    assert off.saved_twice(MLA, w, d) == e * 1 * 8 * T * T  # b = 1, 8 heads, s = s_kv = 4096
    assert off.saved_twice(MLA.model_copy(update={"dropout": 0.1}), w, d) == 0  # the bmm saves the dropped probs
    assert off.saved_twice(MLA, _w(offload_modules=ALL, attention="sdpa"), d) == 0  # no scores saved
    assert off.saved_twice(MLA, _w(offload_modules=("expert_fc1",)), d) == 0


def test_mla_up_proj_discards_q_k_v_but_their_offloaded_copies_come_back():
    w = _w(offload_modules=ALL, recompute="selective", recompute_modules=("mla_up_proj",))
    d = act.dims(MLA, w)
    assert off.qkv_back(MLA, w, d) == e * T * 8 * (2 * (32 + 16) + 32)  # q, k (d_qk 48) and the contiguous v (32)
    assert off.qkv_back(MLA, _w(offload_modules=ALL), d) == 0  # kept by the core attention, already moved
    moved = 10**6
    assert off.reloaded(MLA, w, d, moved) == moved + off.saved_twice(MLA, w, d) + off.qkv_back(MLA, w, d)


def test_the_forward_attention_holds_q_k_v_the_scores_and_the_softmax_output():
    w = _w(offload_modules=ALL)
    d = act.dims(MLA, w)
    qkv = e * T * 8 * (2 * 48 + 32 + 2 * 32)  # q, k; the kv output (d_nope + d_v); the contiguous value
    assert off.forward_attention(MLA, w, d) == qkv + 2 * e * 8 * T * T
    dg = act.dims(GQA, w)
    assert off.forward_attention(GQA, _w(attention="sdpa"), dg) == e * T * (dg.qd + 2 * dg.kvd)


def test_a_forward_beside_the_next_backward_s_reloaded_layer_is_the_peak_with_micro_batches_in_flight():
    """bulk_reload + pre_reload_last_layer: after warmup the kept margin is off the reload stack, so each chunk's
    backward ends with the next backward chunk's last layer reloaded; in 1F1B a forward runs before that backward
    (stage 0 of 2: two micro-batches in flight). The last stage runs each backward right after its forward: none."""
    par = {"pp": 2, "dp": 1, "num_microbatches": 4}
    w = _w(offload_modules=ALL, parallel=par)
    est = estimate(MLA, w, with_fits=False)
    d = act.dims(MLA, w)
    plain = w.model_copy(update={"offload_modules": ()})
    moved = {k: off.offloaded(MLA, w, d, k, core.layer(MLA, plain, d, k)).total
             for k in (LayerKind("mla", "dense"), ROUTED)}
    first = {t.key: t.bytes for t in est.stages[0].terms}
    back = max(off.reloaded(MLA, w, d, x) for x in moved.values())
    assert first["transient.offload_reload"] == back + off.forward_attention(MLA, w, d) - first[
        "activations.offload_kept"]
    assert "transient.offload_reload" not in {t.key for t in est.stages[1].terms}

"""Megatron-Core's selective recompute by module (--recompute-granularity selective --recompute-modules; NVIDIA/
Megatron-LM d98e8a64): which tensors of a decoder layer each module's checkpoint stops keeping. Used by
calculator.impls.megatron_te_core with stack megatron + impl megatron-te; Megatron's default list is ["core_attn"]
(megatron/core/transformer/transformer_config.py: `if self.recompute_modules is None: ["core_attn"]`), an empty
list recomputes nothing.

Two kinds of checkpoint (megatron/core/tensor_parallel/random.py):
- CheckpointWithoutOutput (moe_act, layernorm, mla_up_proj): the function runs without autograd, keeps only its
  inputs, and its output's storage is freed once the consumer has saved it (discard_output_and_register_recompute)
  — what the function saved and its output are both gone;
- tensor_parallel.checkpoint (mlp, moe, shared_experts): the whole submodule runs without autograd and only its
  input is kept.
Each function returns the bytes the module stops keeping for one layer (T tokens on this rank, e the activation
dtype's bytes). The time model replays core_attn, mlp, moe, shared_experts and moe_act
(calculator.timing.train_ops.selective_replay); it does not replay layernorm or mla_up_proj (a norm and two
up-projection GEMMs per layer left out of the backward's time).

layernorm and mla_up_proj are read from the source (layernorm_freed, mla_up_proj_freed) and checked against
Megatron-LM's CI run that lists them (moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental,
validation/published/megatron_ci). Megatron-Bridge's Moonlight-16B sweep (skills/nemo-mbridge-perf-activation-
recompute/card.yaml: TP2 EP8 DP4, one micro-batch of 4,096 tokens, peak allocated after iteration 2) freed 0.72 GB
with mla_up_proj where this rule frees about 1.0 GB, and nothing with layernorm added to moe_act where it frees
0.44 GB; what else those runs keep is not logged, so the sweep is not used as a bound. Under an FP8 recipe both
change what the linears save (set_for_recompute_input_layernorm, a quantized checkpoint): refused there
(calculator.memory.megatron_core).
"""
from __future__ import annotations

from calculator.memory import activations as act
from calculator.memory import megatron_core as core

DEFAULT = ("core_attn",)


def modules(w) -> tuple[str, ...]:
    """The modules recomputed: Megatron's list under selective recompute, else none."""
    return listed(w) if w.recompute == "selective" else ()


def listed(w) -> tuple[str, ...]:
    """The modules selective recompute would replay (the list, or Megatron's default)."""
    return DEFAULT if w.recompute_modules is None else tuple(w.recompute_modules)


def recomputes(w, module: str) -> bool:
    return module in modules(w)


def attention_workload(w):
    """The workload the attention kernels see: 'selective' means the core attention is recomputed only when
    core_attn is in the list (attention.py CoreAttention under `checkpoint_core_attention`)."""
    if w.recompute == "selective" and not recomputes(w, "core_attn"):
        return w.model_copy(update={"recompute": "none"})
    return w


def moe_act_freed(R: int, f: int, gated: bool, e: int, fc2_input: int) -> int:
    """moe_act (moe/experts.py TEGroupedMLP: bias_act_func under CheckpointWithoutOutput, discarded after fc2): the
    activation's output that fc2 saved (`fc2_input`: e·R·f, or its quantized copy under FP8 — with moe_act fc2
    saves the original input, set_save_original_input, and that is discarded) and, after a plain activation, the
    activation output the probability multiply kept (moe_dispatch.weighted_activation_saved); fc1's output and the
    probabilities stay as the checkpoint's inputs."""
    return fc2_input + (0 if gated else e * R * f)


def mlp_checkpoint_input(d) -> int:
    """mlp (transformer_layer.py recompute_mlp, dense layers only, tensor_parallel.checkpoint): the fused pre-MLP
    norm + fc1 and the MLP save nothing; the checkpoint keeps its input, the residual stream e·T·h_sp."""
    return d.e * d.T * d.h_sp


def layernorm_freed(d, layernorm: bool) -> int:
    """layernorm (transformer_layer.py TransformerLayer._run_input_layernorm and _forward_pre_mlp_layernorm:
    CheckpointWithoutOutput(retain_input_tensors=True), discarded after the attention / the MLP in
    _run_self_attention and _apply_mlp_bda_step) for a norm that is a module of its own — TENorm, MLA's input norm
    and a MoE layer's pre-MLP norm in gpt_layer_specs.py; the TE spec fuses the others into the next linear
    (IdentityOp, which nothing recomputes). The norm runs without autograd, so its fp32 statistics are not saved,
    and its output, which the next linears (MLA's down projections; the router, shared expert and dispatcher)
    saved as their input, is freed: e·T·h_sp + the statistics. Its input, the residual stream, stays with the
    checkpoint."""
    return d.e * d.T * d.h_sp + core.norm_stats(d.T, d.h_sp, d.h, layernorm)


def mla_up_proj_freed(m, d) -> int:
    """mla_up_proj (multi_latent_attention.py MLASelfAttention.get_query_key_value_tensors: qkv_up_proj_and_rope_apply
    under CheckpointWithoutOutput, discarded after the core attention in forward): the checkpoint keeps its inputs —
    the q and kv latents (e·T·(q_lora + kv_lora)) and the rope part of the kv down projection; the up projections
    (TELayerNormColumnParallelLinear with the latent norms fused, gpt_layer_specs.py) save nothing, and the query,
    key and value the core attention saved are freed. Of what calculator.memory.activations.mla_attention_saved
    counts, that is the latent norms' saved tensors beyond their inputs, the value's copy (e·T·a·d_v: what Megatron
    keeps of the kv up-projection output, megatron_te_core.mla_value_copy_change) and the concatenated q and k
    (2·e·T·a·d_qk); the core's scores and its output (the projection's input) stay."""
    e, T, a = d.e, d.T, d.a
    ql, kvl = m.q_lora_rank or 0, m.kv_lora_rank or 0
    latents = (act.rmsnorm_saved(T, ql, e) + e * T * ql if ql else 0) + act.rmsnorm_saved(T, kvl, e) + e * T * kvl
    return latents - e * T * (ql + kvl) + e * T * a * m.v_head_size + 2 * e * T * a * m.head_size

"""Megatron-Core's selective recompute by module (--recompute-granularity selective --recompute-modules; NVIDIA/
Megatron-LM d98e8a64): which tensors of a decoder layer each module's checkpoint stops keeping. Used by
calculator.impls.megatron_te_core with stack megatron + impl megatron-te; Megatron's default list is ["core_attn"]
(megatron/core/transformer/transformer_config.py: `if self.recompute_modules is None: ["core_attn"]`), an empty
list recomputes nothing.

Two kinds of checkpoint (megatron/core/tensor_parallel/random.py):
- CheckpointWithoutOutput (moe_act): the function runs without autograd, keeps only its inputs, and its output's
  storage is freed once the consumer has saved it (discard_output_and_register_recompute) — what the function
  saved and its output are both gone;
- tensor_parallel.checkpoint (mlp, moe, shared_experts): the whole submodule runs without autograd and only its
  input is kept.
Each function returns the bytes the module stops keeping for one layer (T tokens on this rank, e the activation
dtype's bytes); the time model replays the same modules (calculator.timing.train_ops.selective_replay).

mla_up_proj and layernorm are refused (calculator.memory.megatron_core): the one published measurement of them,
Megatron-Bridge's Moonlight-16B sweep (skills/nemo-mbridge-perf-activation-recompute/card.yaml: TP2 EP8 DP4 on
8 H100, one micro-batch of 4,096 tokens, peak allocated after iteration 2), freed 0.72 GB with mla_up_proj where
the checkpoint's source implies about 1.0 GB (q, k, v and the kv latent norm's output, 27 layers), and nothing
with layernorm added to moe_act where it implies 0.44 GB (the MLA input norm's and the pre-MLP norm's outputs).
What else those runs keep is not known here. core_attn reads as measured (−0.004 GB, the engine −0.004 GB) and
moe_act frees 0.68 GB against the engine's 0.90 GB at balanced routing (the run routes by aux loss; the rank's
experts' share of rows, which scales it, is not logged).
"""
from __future__ import annotations

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

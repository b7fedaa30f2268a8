"""torch.autocast over an fp32 model (the `amp-fp32` recipe: fp32 parameters, bf16/fp16 matmuls): what the
forward keeps for the backward beyond a model that runs in bf16 throughout.

PyTorch's autocast (aten/src/ATen/autocast_mode.h, `cached_cast`) casts each fp32 leaf that requires grad — every
weight a linear reads — to bf16 once per autocast region and caches the copy; the linear saves it for the input
gradient, so every layer linear and the LM head hold a bf16 copy from the forward to the backward. Activations are
not cached: each linear casts its own copy of its input. Ops outside autocast's lists (the embedding lookup, adds,
transformers' RMSNorm multiply) stay fp32, so the residual stream is fp32 and so is what each norm keeps.

Measured on an H200 (tests/golden_gpu/h200: Llama-3.2-1B, b·s = 8192, plain loop and HF Trainer): the forward kept
5,190,609,336 B more than the engine's bf16 layers; these terms give 5,189,402,624 (0.003% of the peak).
Full recompute (torch.utils.checkpoint) is measured right without them (Llama-3.1-8B, Qwen3-4B): not applied there.
"""
from __future__ import annotations

from calculator.model.spec import ModelSpec


def autocast_on(w) -> bool:
    """fp32 parameters with bf16/fp16 activations: the forward runs under torch.autocast."""
    return w.precision.params == "fp32" and w.precision.activations in ("bf16", "fp16")


def applies(w) -> bool:
    """Whether these terms apply: autocast over fp32 weights, training, without full recompute."""
    return w.mode == "train" and autocast_on(w) and w.recompute != "full"


def weight_copy_bytes(layer_linear: int, head: int, e: int) -> int:
    """The bf16 copies autocast caches of every layer linear and the LM head (a tied head is the embedding's
    weight, cast for the head's matmul): e × (N_layer_linear + V·h) on this GPU."""
    return e * (layer_linear + head)


def norm_readers(m: ModelSpec) -> tuple[int, int]:
    """Linears that read the attention norm's and the MLP norm's output, each casting its own bf16 copy:
    q, k, v (1 when fused, MLA's q_a and kv_a: 2) and gate, up (1 when fused or a plain MLP)."""
    attention = 1 if m.fused_qkv else (2 if m.is_mla else 3)
    mlp = 2 if (m.gated_mlp and not m.fused_gate_up) else 1
    return attention, mlp


def norm_extra_per_elem(m: ModelSpec, e: int) -> int:
    """Bytes per element one norm keeps beyond transformers' bf16 model: HF RMSNorm's normalised copy is fp32
    (its fp32 input is the residual itself, as the bf16 model's upcast copy was) and LayerNorm's input is fp32:
    4 − e; norms that compute in fp32 either way (Gemma's, GPT-OSS's, the zero-centred / fp32-weight RMSNorms of
    Qwen3.5 and Nemotron-H, a variant's fp32-weight RMSNorm or fp32 LayerNorm, calculator.model.variants): 0."""
    fp32_variant = m.variant is not None and m.variant.norm in ("fp32_weight", "fp32_layernorm")
    return 0 if (m.family in ("gemma", "gpt_oss") or m.zero_centered_norm or fp32_variant) else 4 - e


def layer_extra(m: ModelSpec, T: int, h: int, e: int) -> int:
    """Per decoder layer: the norms' fp32 copies and one more bf16 input copy per extra reader of a norm output
    ((4 − e)·T·h per norm + e·T·h per extra reader; Llama: 10·T·h in bf16)."""
    attention, mlp = norm_readers(m)
    norms = m.norms_per_layer * norm_extra_per_elem(m, e) * T * h
    return norms + (attention - 1 + mlp - 1) * e * T * h


def final_norm_extra(m: ModelSpec, T: int, h: int, e: int) -> int:
    """The final norm's fp32 normalised copy ((4 − e)·T·h)."""
    return norm_extra_per_elem(m, e) * T * h

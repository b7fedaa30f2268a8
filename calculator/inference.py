"""Inference memory: (quantized) weights, the KV cache (MHA/GQA/MQA, MLA latent, sliding windows) and the
prefill working set."""
from __future__ import annotations

from calculator.dtypes import DTYPE_BITS, nbytes
from calculator.model import ModelSpec

# Per-group scale overhead of quantized weights, bytes per group (QLoRA / GPTQ / OCP MX).
GROUP_SCALE_BYTES: dict[str, float] = {
    "int8": 2.0,  # fp16 scale per group (absmax / zero-point-free int8)
    "int4": 2.5,  # GPTQ/AWQ: fp16 scale + packed 4-bit zero point per group
    "nf4": 4.0,  # bitsandbytes NF4: fp32 absmax per 64-element block (no double quantization)
    "fp4": 1.0,  # MXFP4: one E8M0 scale per 32 elements
}
GROUP_SIZE_DEFAULTS: dict[str, int] = {"nf4": 64, "fp4": 32}


def quantized_weight_bytes(n_params: int, dtype: str, group_size: int) -> int:
    """Quantized weights: N × bits/8 plus one scale (and zero point) per group of `group_size` elements
    (GPTQ/AWQ int4: 2.5 B per group; NF4: 4 B per 64; MXFP4: 1 B per 32). fp8/bf16/fp32: N × bytes."""
    data = nbytes(n_params, dtype)
    if dtype not in GROUP_SCALE_BYTES:
        return data
    group = GROUP_SIZE_DEFAULTS.get(dtype, group_size)
    groups = -(-n_params // group)
    return data + int(groups * GROUP_SCALE_BYTES[dtype] + 0.5)


def kv_bytes_per_token_per_layer(m: ModelSpec, kv_heads: int, dtype: str) -> int:
    """K and V of one token in one layer: 2·kv_heads·head_dim elements (GQA/MQA; Pope et al. 2022);
    MLA caches the latent instead: kv_lora_rank + qk_rope_head_dim elements (DeepSeek-V2 §2.1.2)."""
    if m.is_mla:
        return nbytes(m.kv_lora_rank + m.qk_rope_head_dim, dtype)
    return nbytes(2 * kv_heads * m.head_size, dtype)


def cached_tokens(m: ModelSpec, layer: int, total_tokens: int) -> int:
    """Tokens a layer keeps in its cache: all of them, or at most the window on a sliding-window layer
    (Mistral 7B §2 rolling buffer)."""
    if m.layer_is_sliding(layer) and m.sliding_window:
        return min(total_tokens, m.sliding_window)
    return total_tokens


def kv_cache_bytes(m: ModelSpec, layers: range, batch: int, total_tokens: int, kv_heads: int, dtype: str) -> int:
    """KV cache of the given layers: Σ_layers batch × cached tokens × per-token bytes."""
    per_token = kv_bytes_per_token_per_layer(m, kv_heads, dtype)
    return sum(batch * cached_tokens(m, i, total_tokens) * per_token for i in layers)


def prefill_working_set(m: ModelSpec, T: int, e: int, qd: int, kvd: int, f: int, a: int, b: int, s: int,
                        vocab: int, eager: bool) -> int:
    """Largest live set of one layer during prefill (nothing is saved for backward): the residual stream and the
    norm output (2·e·T·h) plus the larger of attention (q, k, v, out: e·T·(2·qd + 2·kvd); eager also the fp32
    a·b·s² scores) and the MLP (gate, up and act: 3·e·T·f), plus last-position logits in fp32 (b·V·(e + 4))."""
    h = m.hidden_size
    attention = e * T * (2 * qd + 2 * kvd) + ((4 + e) * a * b * s * s if eager else 0)
    if m.is_moe:
        f = (m.expert_intermediate_size * m.num_experts_per_tok)
    mlp = (3 if m.gated_mlp else 2) * e * T * f
    return 2 * e * T * h + max(attention, mlp) + b * vocab * (e + 4)


def weight_bits_label(dtype: str) -> str:
    return f"{DTYPE_BITS[dtype]}-bit"

"""Saved tensors of the rotary and q/k-norm layouts of GPT-J / CodeGen and Persimmon (issue 21), priced for
calculator.model.variants (VariantSpec.per_call_rope, rotary_dim, qk_norm_layout "layernorm_head"), each function
read beside the transformers 5.23 code it mirrors and held to a CPU trace of it (tests/model/test_rope_variants.py,
validation/architectures/table.json).

T tokens, s positions, e bytes per activation element; widths on this TP rank. Nothing here imports the engine.
"""
from __future__ import annotations

PER_CALL_TABLES = 4  # sin and cos, for k's call and for q's call


def per_call_rope_saved(dtype: str, s: int, width: int, e: int) -> int:
    """GPT-J (models/gptj/modeling_gptj.py) and CodeGen (models/codegen/modeling_codegen.py): GPTJAttention.forward
    gathers sincos by position_ids (one row of positions: `arange(s).unsqueeze(0)`), splits it into sin and cos of
    rotary_dim / 2, and calls apply_rotary_pos_emb once for k_rot and once for q_rot; each call
    repeat_interleaves sin and cos to 1 × s × 1 × rotary_dim, and `tensor * cos` and `rotate_every_two(tensor) *
    sin` keep those copies (the rotated tensor itself is not kept: the tables need no gradient; torch.cat of the
    rotated and pass-through parts keeps nothing). Four tables per layer, each layer its own:
    4·s·rotary_dim × e (GPT-J: `.to(key.dtype)`), or × 4 B (CodeGen: `embed_positions[position_ids]` indexes the
    fp32 buffer and is never cast, so q and k leave the rotation in fp32 too). The shared tables a Llama-style
    model computes once do not exist here (shared_rope_width)."""
    return PER_CALL_TABLES * s * width * (4 if dtype == "fp32" else e)


def shared_rope_width(per_call: bool, rotary_dim: int, head_dim: int) -> int:
    """The width of the cos / sin tables computed once per forward and kept by every layer's rotation: rotary_dim
    under partial rotary (models/persimmon/modeling_persimmon.py PersimmonRotaryEmbedding: dim = head_dim ·
    partial_rotary_factor), none when each layer makes its own (GPT-J's per-call tables), else head_dim."""
    if per_call:
        return 0
    return rotary_dim or head_dim


def fused_view_qk_layernorm_saved(T: int, qd: int, kvd: int, rows: int, e: int, fused_kept: bool) -> int:
    """Persimmon's q_layernorm and k_layernorm (models/persimmon/modeling_persimmon.py PersimmonAttention.forward):
    nn.LayerNorm(head_dim) on query_states and key_states, which _split_heads returns as views of the fused
    query_key_value output (`fused_qkv[..., 0, :]`). Each keeps its input, that is the whole fused output's storage
    (e·T·(qd + 2·kvd), counted once for both norms), and an fp32 mean and rstd per head and token (8 B per row).
    `fused_kept`: the attention core already keeps the fused output (its v is a view of it: FlashAttention / SDPA,
    or the eager matmul at micro-batch 1, calculator.memory.activations.qkv_saved), so the norms add only their
    statistics; with an eager core at micro-batch > 1 (which copies v) the norms alone keep it."""
    return 8 * rows + (0 if fused_kept else e * T * (qd + 2 * kvd))

"""Which Transformer Engine attention backend runs a Megatron-Core layer, and what its inputs cost once TE has laid
them out (NVIDIA/TransformerEngine at f031cf87 / 42b84005 / e7c550c5, the 2.14–2.18 releases the Megatron-LM CI
golden values ran; source key "te-attention-backend" in calculator/core/megatron_sources.py).

- Backend (transformer_engine/common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend; pytorch/attention/
  dot_product_attention/utils.py get_attention_backend): cuDNN's F16_arbitrary_seqlen FusedAttention is preferred
  on Hopper and later, but on Blackwell (sm ≥ 100) deterministic training — TE reads it from
  NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 or torch.use_deterministic_algorithms, which Megatron's --deterministic-mode
  sets — only runs it with cuDNN ≥ 9.18.1 and no attention dropout and no bias; otherwise TE falls back to
  FlashAttention.
- Layout (utils.py get_qkv_layout): q, k, v reach TE as views of Megatron's fused qkv output only when they are its
  interleaved heads (MHA without RoPE: `sbh3d`); any other combination — GQA's reshaped query beside k and v views,
  RoPE's new q and k beside the v view, q/k norms' outputs beside it — is "not_supported" and TE makes each one
  contiguous: the views are copied and the fused output is freed (unless a q/k norm keeps views of it).
- FlashAttention on `sbhd` inputs (pytorch/attention/dot_product_attention/backends.py FlashAttention.forward)
  transposes q, k, v to new `bshd` tensors that flash-attn saves, saves its `bshd` output and returns a transposed
  contiguous copy to the output projection: one more e·T·qd than FusedAttention, whose `sbhd` output is the very
  tensor the projection keeps.
"""
from __future__ import annotations

FUSED = "fused"  # cuDNN FusedAttention (F16_arbitrary_seqlen)
FLASH = "flash"  # flash-attn through TE's FlashAttention backend


def attention_backend(compute_capability: tuple[int, int] | None, deterministic: bool, dropout: float,
                      training: bool = True) -> str:
    """TE's backend for bf16/fp16 self-attention with a causal mask and no bias (fused_attn.cpp
    nvte_get_fused_attn_backend, "determinism on Blackwell": sm ≥ 100 trains deterministically in cuDNN only with
    cuDNN ≥ 9.18.1 and dropout 0 — the newer cuDNN is assumed, so dropout decides). Unknown GPU: Hopper's rule."""
    blackwell = compute_capability is not None and compute_capability[0] >= 10
    if blackwell and training and deterministic and dropout > 0:
        return FLASH
    return FUSED


def qkv_kept(e: int, T: int, qd: int, kvd: int) -> int:
    """Bytes of q, k and v the core attention keeps (get_qkv_layout): the fused qkv output e·T·(qd + 2·kvd) while
    q, k, v are its interleaved views (MHA, no RoPE, no q/k norm); in every other layout TE's contiguous copies of
    the same total size — GQA's k and v, RoPE's v, beside the already new q (and k) — replace the views and the
    fused output is freed (a q/k norm's own saved inputs, views of it, are the caller's). FlashAttention's `bshd`
    transposes again replace them one for one."""
    return e * T * (qd + 2 * kvd)


def backend_extra(backend: str, e: int, T: int, qd: int) -> int:
    """What a backend keeps beyond q, k, v, its fp32 statistics and the output the projection saves:
    FlashAttention's own `bshd` output (e·T·qd) beside the transposed copy it returns; FusedAttention nothing."""
    return e * T * qd if backend == FLASH else 0

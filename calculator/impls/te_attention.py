"""Which Transformer Engine attention backend runs a Megatron-Core layer, and what its inputs cost once TE has laid
them out (NVIDIA/TransformerEngine v2.11–v2.18, the releases the Megatron-LM CI golden values ran: c188b533,
f031cf87, 42b84005, 4220403e / f8a01cd5, e7c550c5; source key "te-attention-backend" in
calculator/core/megatron_sources.py).

- Backend: cuDNN's F16_arbitrary_seqlen FusedAttention is preferred on Hopper and later (utils.py
  get_attention_backend, "Select FusedAttention for performance"), except on Blackwell under deterministic
  training — TE reads it from NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 or torch.use_deterministic_algorithms, both set
  by Megatron's --deterministic-mode — where TE falls back to FlashAttention (flash-attn 2: utils.py v2.18 drops
  FA3 off sm 90, lines 495–498, and FA3 / FA4 under dropout, lines 1009–1016). Which Blackwell runs fall back
  depends on TE's release and the cuDNN it loads:
  * TE ≤ 2.11 (pytorch/attention/dot_product_attention/utils.py get_attention_backend, v2.11 lines 1067–1070,
    "Disabling FusedAttention for determinism reasons on Blackwell"): every deterministic training run, sm ≥ 100;
  * TE ≥ 2.12 (common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend, "determinism on Blackwell": v2.12
    lines 448–456, v2.18 lines 462–470): cuDNN only with cuDNN ≥ 9.18.1, attention dropout 0 and no bias;
  * TE ≥ 2.14 on sm 120 (fused_attn.cpp, v2.16 lines 501–510, v2.18 lines 505–514: "Deterministic fused
    attention on SM120 is not supported"): never cuDNN.
  Megatron's --attention-dropout defaults to 0.1 (transformer_config.py), so its deterministic Blackwell runs fall
  back under every one of these releases.
- Layout (utils.py get_qkv_layout): q, k, v reach TE as views of Megatron's fused qkv output only when they are its
  interleaved heads (MHA without RoPE: `sbh3d`); any other combination — GQA's reshaped query beside k and v views,
  RoPE's new q and k beside the v view, q/k norms' outputs beside it — is "not_supported" and TE makes each one
  contiguous: the views are copied and the fused output is freed (unless a q/k norm keeps views of it).
- FlashAttention on `sbhd` inputs (backends.py FlashAttention.forward, v2.18 lines 861–877 and 1267–1289)
  transposes q, k, v to `bshd` with `.transpose(0, 1).contiguous()`, which flash-attn saves, and returns its
  `bshd` output as `output.view(b, s, -1).transpose(0, 1).contiguous()`: with b > 1 a new tensor, one more e·T·qd
  than FusedAttention, whose `sbhd` output is the very tensor the projection keeps. With micro-batch 1 both
  transposes only move a size-1 dimension, which PyTorch's contiguity check skips: `.contiguous()` returns the
  tensor itself, flash-attn's output is what the projection keeps, and nothing more is held.
"""
from __future__ import annotations

FUSED = "fused"  # cuDNN FusedAttention (F16_arbitrary_seqlen)
FLASH = "flash"  # flash-attn through TE's FlashAttention backend

LATEST_TE = (2, 18)  # the newest release read; None (unknown) behaves as this one
CUDNN_BLACKWELL_DETERMINISTIC = (9, 18, 1)  # fused_attn.cpp: cudnn_runtime_version >= 91801
TE_CUDNN_DECIDES = (2, 12)  # the C++ rule above replaced the Python one in this release
TE_SM120_NO_DETERMINISM = (2, 14)  # "Deterministic fused attention on SM120 is not supported" from this release


def attention_backend(compute_capability: tuple[int, int] | None, deterministic: bool, dropout: float,
                      training: bool = True, te_version: tuple[int, int] | None = None,
                      cudnn_version: tuple[int, int, int] | None = None) -> str:
    """TE's backend for bf16/fp16 self-attention with a causal mask and no bias (see the module docstring for the
    source lines of each rule). te_version (major, minor) and cudnn_version (major, minor, patch) are the run's
    Transformer Engine and cuDNN; None means the latest behaviour (TE 2.18 with a cuDNN ≥ 9.18.1). Unknown GPU:
    Hopper's rule (cuDNN)."""
    blackwell = compute_capability is not None and compute_capability[0] >= 10
    if not (blackwell and training and deterministic):
        return FUSED
    te = te_version or LATEST_TE
    if te < TE_CUDNN_DECIDES:  # utils.py: any deterministic training on sm >= 100 leaves cuDNN
        return FLASH
    if te >= TE_SM120_NO_DETERMINISM and tuple(compute_capability) == (12, 0):
        return FLASH
    cudnn_ok = cudnn_version is None or tuple(cudnn_version) >= CUDNN_BLACKWELL_DETERMINISTIC
    return FUSED if cudnn_ok and dropout == 0 else FLASH


def qkv_kept(e: int, T: int, qd: int, kvd: int) -> int:
    """Bytes of q, k and v the core attention keeps (get_qkv_layout): the fused qkv output e·T·(qd + 2·kvd) while
    q, k, v are its interleaved views (MHA, no RoPE, no q/k norm); in every other layout TE's contiguous copies of
    the same total size — GQA's k and v, RoPE's v, beside the already new q (and k) — replace the views and the
    fused output is freed (a q/k norm's own saved inputs, views of it, are the caller's). FlashAttention's `bshd`
    transposes again replace them one for one (with micro-batch 1 they are the same tensors)."""
    return e * T * (qd + 2 * kvd)


def backend_extra(backend: str, e: int, T: int, qd: int, micro_batch: int) -> int:
    """What a backend keeps beyond q, k, v, its fp32 statistics and the output the projection saves:
    FlashAttention's own `bshd` output (e·T·qd) beside the transposed copy it returns — none with micro-batch 1,
    where the returned tensor is flash-attn's output itself; FusedAttention nothing."""
    return e * T * qd if backend == FLASH and micro_batch > 1 else 0

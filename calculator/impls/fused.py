"""What a decoder layer saves when its norms and its gated activation are fused kernels — the layer Liger kernels,
Transformer Engine and Inductor (torch.compile) all produce, measured on an H200 (tests/golden_gpu: Liger on
Llama-3.x, Qwen3 and Gemma-3; compiled Llama-3.2 and Qwen3 blocks agree with it to the byte).

Relative to transformers' eager modules (calculator.memory.activations.exact_layer):
- a fused RMSNorm keeps its input in the model dtype and one fp32 rstd per row (e·T·h + 4·T) instead of the fp32
  upcast, the normalised copy and the rsqrt (4·T·h + e·T·h + 4·T; Gemma 8·T·h + 4·T); its output is still kept by
  the linear that reads it. Per-head q/k norms (Qwen3, Gemma-3) likewise: e·T·(qd + kvd) + 4·T·(a + kv).
- a fused SwiGLU / GeGLU keeps gate and up and the product (the down projection's input) but not the activation
  output: 3·e·T·f instead of 4; GPT-2's Python GELU becomes one fused op: fc1 output and its activation, 2·e·T·f.
- attention, RoPE (rotated in place or recomputed), MoE experts and LoRA adapters keep what transformers keeps.
Sources: liger-kernel 0.8.5 ops/rms_norm.py (LigerRMSNormFunction saves X, W, RSTD), ops/swiglu.py
(LigerSiLUMulFunction saves a, b); TransformerEngine pytorch/module/layernorm_mlp.py (saves inputmat, ln_out,
mu/rsigma, fc1_out, act_out); torch/_functorch/partitioners.py (min_cut_rematerialization_partition).
"""
from __future__ import annotations

from calculator.memory import activations as act
from calculator.memory.lora import frozen_norm_copy


def fused_rmsnorm_saved(T: int, width: int, e: int) -> int:
    """A fused RMSNorm: its input in the model dtype and an fp32 rstd per row (liger ops/rms_norm.py)."""
    return e * T * width + 4 * T


def fused_qk_norm_saved(d, m) -> int:
    """Per-head q and k norms, fused: inputs e·T·(qd + kvd) and an fp32 rstd per head and token."""
    if not m.qk_norm:
        return 0
    return d.e * d.T * (d.qd + d.kvd) + 4 * d.T * (d.a + d.kv)


def fused_mlp_saving(m, d) -> int:
    """Bytes the fused activation does not keep, relative to transformers: the gated activation's output (e·T·f);
    GPT-2's gelu_new keeps two f-wide tensors instead of five (3·e·T·f)."""
    if m.gated_mlp:
        return d.e * d.T * d.f
    if m.hidden_act == "gelu_new":
        return 3 * d.e * d.T * d.f
    return 0


def fused_layer(m, w, d, kind) -> act.LayerActivations:
    """transformers' layer (with its LoRA adapters) with fused norms and a fused gated activation."""
    hf = act.exact_layer(m, w, d, kind)
    moe = kind.ffn != "dense"  # the fused gated activation replaces a dense MLP's
    if m.is_mla or m.norm_type != "rmsnorm":  # LayerNorm already keeps only input + statistics; MLA not measured
        return hf._replace(mlp=hf.mlp - (0 if moe else fused_mlp_saving(m, d)))
    # a block with one half only (Nemotron-H's Mamba, MoE or attention blocks: mixer or ffn "none") has one norm
    # (calculator.model.parameters and timing.ops count its norms the same way)
    n = m.norms_per_layer if "none" not in (kind.mixer, kind.ffn) else 1
    hf_copies = act.norm_saved(m, d.T, d.h_sp, d.e)
    if w.finetune != "full":  # transformers' frozen norm weight already keeps no normalised copy
        hf_copies -= frozen_norm_copy(m, d.e) * d.T * d.h_sp
    norms = hf.norms + n * (fused_rmsnorm_saved(d.T, d.h_sp, d.e) - hf_copies)
    if w.finetune != "full" and m.qk_norm:  # the frozen q/k norms' copy LoRA dropped, which fused norms never make
        norms += frozen_norm_copy(m, d.e) * d.T * (d.qd + d.kvd)
    attention = hf.attention - act.qk_norm_saved(d, m) + fused_qk_norm_saved(d, m)
    mlp = hf.mlp - (0 if moe else fused_mlp_saving(m, d))
    return act.LayerActivations(norms, attention, mlp)

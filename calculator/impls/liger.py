"""transformers with Liger kernels (liger-kernel 0.8.5, `_apply_liger_kernel_to_instance`, the switch TRL, Axolotl
and LLaMA-Factory call `use_liger_kernel`): LigerRMSNorm, LigerSwiGLUMLP / LigerGEGLUMLP, liger_rotary_pos_emb and
the fused linear cross-entropy (FLCE), measured on an H200 to within 0.01% of the saved activations
(tests/golden_gpu, impl-liger cases).

Layers: calculator.impls.fused (the norms keep input + rstd, SwiGLU keeps gate and up; RoPE rotates q and k in place,
so attention keeps what transformers keeps).
Head (transformers/model/loss_utils.py LigerForCausalLMLoss -> ops/fused_linear_cross_entropy.py): the logits are
never materialised. The forward walks the tokens in chunks of next_pow2(⌈T / ⌈V/h⌉⌉) rows, runs the softmax and
writes the gradients at once: it keeps grad_input (e·T·h) and, when the LM head trains, grad_weight (V·h in the
weight's dtype — the LM head's gradient, born in the forward) until backward, which only hands them on.
"""
from __future__ import annotations

from calculator.core.dtypes import nbytes
from calculator.impls.common import Head, HeadTerm
from calculator.impls.fused import fused_layer, fused_rmsnorm_saved

# model types `_apply_liger_kernel_to_instance` patches (liger_kernel/transformers/monkey_patch.py,
# MODEL_TYPE_TO_APPLY_LIGER_FN) among those the engine describes; any other type runs unpatched
PATCHED_MODEL_TYPES = frozenset({
    "llama", "mistral", "ministral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi3", "granite", "olmo2", "olmo3", "glm4", "smollm3", "deepseek_v2", "deepseek_v3", "gpt_oss",
    "exaone4", "hunyuan_v1_dense", "hunyuan_v1_moe"})


def patched(m) -> bool:
    """Whether Liger has kernels for this model type (otherwise the model runs as transformers wrote it)."""
    return m.model_type in PATCHED_MODEL_TYPES


def layer(m, w, d, kind):
    """One decoder layer with Liger's RMSNorm and SwiGLU/GeGLU (calculator.impls.fused)."""
    if not patched(m):
        from calculator.impls import hf
        return hf.layer(m, w, d, kind)
    return fused_layer(m, w, d, kind)


def flce_chunk_rows(T: int, h: int, vocab: int) -> int:
    """Rows of logits FLCE materialises at a time: next_pow2(⌈T / ⌈V/h⌉⌉), at most T
    (fused_linear_cross_entropy_forward: inc_factor, chunk_size)."""
    inc = max(1, -(-vocab // h))  # a vocabulary smaller than TP leaves no column on this rank: one chunk
    rows = -(-T // inc)
    return min(1 << (rows - 1).bit_length(), T)


def head(m, w, d) -> Head:
    """Final LigerRMSNorm (input + rstd) and FLCE's gradients; the working set is the larger of the forward at FLCE
    (the final norm's output, one chunk of logits, labels and per-token loss) and the backward of the last layer's
    down projection (the f-wide input gradient, once the final norm's input and rstd are freed)."""
    if not patched(m):
        from calculator.impls import hf
        return hf.head(m, w, d)
    v = m.vocab_size // d.tp
    trains_head = w.finetune == "full"
    norm = fused_rmsnorm_saved(d.T, d.h_sp, d.e)
    grad_in = d.e * d.T * d.h_sp
    grad_w = nbytes(v * m.hidden_size, w.precision.params) if trains_head else 0
    saved = [HeadTerm("final_norm", "Final norm input + rstd (LigerRMSNorm)", norm, "e·T·h + 4·T",
                      f"{d.e} × {d.T:,} × {d.h_sp:,} + 4 × {d.T:,}", "liger-kernel"),
             HeadTerm("loss", "Fused linear cross-entropy: input gradient (no logits)", grad_in, "e·T·h",
                      f"{d.e} × {d.T:,} × {d.h_sp:,}", "liger-kernel")]
    if grad_w:
        saved.append(HeadTerm("lm_head_grad", "LM-head gradient computed in the forward (FLCE)", grad_w,
                              "V/t × h × b_param", f"{v:,} × {m.hidden_size:,} × {nbytes(1, w.precision.params)}",
                              "liger-kernel"))
    rows = flce_chunk_rows(d.T, m.hidden_size, v)
    forward = d.e * d.T * d.h_sp + d.e * rows * v + 21 * d.T  # + int64 labels ×2, bool mask, fp32 loss per token
    backward = d.e * d.T * d.f - d.e * d.T * d.h_sp - 4 * d.T if not m.is_moe else 0
    grads = m.hidden_size * d.f + m.hidden_size  # down projection + final norm weight
    if forward >= backward:
        return Head(tuple(saved), forward, "Final norm output + one chunk of logits (FLCE forward)",
                    "e·T·h + e·rows·V/t + 21·T (rows = next_pow2(⌈T/⌈V/h⌉⌉))",
                    f"{d.e} × {d.T:,} × {d.h_sp:,} + {d.e} × {rows:,} × {v:,} + 21 × {d.T:,}", "liger-kernel",
                    backward, grads)
    return Head(tuple(saved), backward, "Down-projection input gradient of the last layer (backward)",
                "e·T·f − e·T·h − 4·T", f"{d.e} × {d.T:,} × ({d.f:,} − {d.h_sp:,}) − 4 × {d.T:,}", "liger-kernel",
                backward, grads)


def first_layer_without_input_grad(m, d) -> int:
    """PEFT without checkpointing: the first layer's input needs no gradient, so its first LigerRMSNorm records
    nothing (e·T·h + 4·T)."""
    return fused_rmsnorm_saved(d.T, d.h_sp, d.e) if patched(m) and m.norm_type == "rmsnorm" else 0

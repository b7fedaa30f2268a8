"""Megatron-Core GPT with Transformer Engine layers (the `transformer_engine` spec: TELayerNormColumnParallelLinear,
TEDotProductAttention, TE fused RoPE, LayerNormMLP-style fc1 with the norm fused in) and Megatron's vocab-parallel
cross-entropy.

Layers (TransformerEngine transformer_engine/pytorch/module/layernorm_linear.py and layernorm_mlp.py): each fused
norm + linear keeps the norm input, an fp32 rsigma per row and the normalised output (the GEMM input); fc1 keeps its
2f-wide output (gate and up) and the activation output (fc2's input); fused attention keeps q, k, v unexpanded
(GQA), the output and fp32 softmax statistics — calculator.impls.fused, the layer Liger and Inductor also produce.
Megatron's own summary of the same layer is s·b·h·(18 + 4·f/h) bytes (megatron/training/theoretical_memory_usage.py,
compute_activation_memory, Korthikanti et al. Table 2 with flash attention), which ignores GQA and a query width
≠ h.
Head (megatron/core/tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy): the final norm keeps its input and
rsigma, the output layer its input; the cross-entropy upcasts this rank's logits to fp32 and turns them into the
softmax in place, which it saves (4·T·V/t); the backward writes the gradient into that same buffer, and the cast
back to the model dtype (e·T·V/t) is the only new tensor — as large as the model-dtype logits of the forward.
Not measured on a GPU here.
"""
from __future__ import annotations

from calculator.impls import megatron_te_core as core
from calculator.impls.common import Head, HeadTerm
from calculator.impls.fused import fused_layer, fused_rmsnorm_saved
from calculator.memory.megatron_core import applies


def layer(m, w, d, kind):
    """One Megatron/TE decoder layer: Megatron-Core's own (calculator.impls.megatron_te_core) when the stack is
    named megatron, else the fused layer (calculator.impls.fused)."""
    if applies(w):
        return core.layer(m, w, d, kind)
    return fused_layer(m, w, d, kind)


def head(m, w, d) -> Head:
    """Final norm (input + rsigma) + output-layer input, Megatron's fp32 softmax, and the model-dtype logits (forward)
    or gradient (backward) beside it (Megatron-Core's own head with the stack named megatron)."""
    if applies(w):
        return core.head(m, w, d)
    v = m.vocab_size // d.tp
    norm = fused_rmsnorm_saved(d.T, d.h_sp, d.e) + d.e * d.T * d.h_sp
    softmax = 4 * d.T * v
    ws = d.e * d.T * v
    return Head(
        (HeadTerm("final_norm", "Final norm (input + rsigma) + output-layer input", norm, "e·T·h + 4·T + e·T·h",
                  f"{norm:,} B", "transformer-engine"),
         HeadTerm("loss", "fp32 softmax saved by the vocab-parallel cross-entropy", softmax, "4·T·V/t",
                  f"4 × {d.T:,} × {v:,}", "megatron-cross-entropy")),
        ws, "Model-dtype logits (forward) / their gradient (backward) beside the fp32 softmax", "e·T·V/t",
        f"{d.e} × {d.T:,} × {v:,}", "megatron-cross-entropy", ws)


def first_layer_without_input_grad(m, d) -> int:
    """Frozen first layer input: its fused norm keeps nothing (input + rsigma)."""
    return fused_rmsnorm_saved(d.T, d.h_sp, d.e) if m.norm_type == "rmsnorm" else 0
